// The GPU tests' account of submitted work: what each item asked for, and a
// check of every completion against it (exactly once, completed, the right
// step count, the value the program must produce). One ledger per test, so
// each engine test states its exactly-once promise the same way.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "baton/runtime.h"
#include "support/gpu_test.h"
#include "support/poll.h"

namespace baton::testing {

class CompletionLedger {
 public:
  // The value a completed item of `steps` steps must carry.
  using ExpectedValue = std::function<std::uint32_t(std::uint32_t id, std::uint32_t steps)>;

  explicit CompletionLedger(ExpectedValue expected_value)
      : expected_value_(std::move(expected_value)) {}

  // `count` items with ids first_id, first_id + 1, ..., each asking for a
  // number of steps drawn uniformly from [min_steps, max_steps].
  std::vector<WorkItem> MakeItems(std::mt19937& rng, std::uint32_t kind, std::uint32_t first_id,
                                  std::uint32_t count, std::uint32_t min_steps,
                                  std::uint32_t max_steps) {
    std::vector<WorkItem> items;
    items.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::uint32_t steps =
          std::uniform_int_distribution<std::uint32_t>(min_steps, max_steps)(rng);
      items.push_back(WorkItem::make(kind, first_id + i, steps));
      Expect(first_id + i, steps);
    }
    return items;
  }

  void Expect(std::uint32_t id, std::uint32_t steps) { needed_[id] = steps; }
  // An item the queue refused: it must never complete.
  void Forget(std::uint32_t id) { needed_.erase(id); }
  // Starts a new round over the same expectations (e.g. the same items on
  // another engine).
  void ClearCompletions() { completions_.clear(); }

  // Checks one completion against what its item asked for and records it.
  void Account(const Completion& c) {
    const auto need = needed_.find(c.id);
    ASSERT_NE(need, needed_.end()) << "phantom completion for id " << c.id;
    EXPECT_TRUE(completions_.emplace(c.id, c).second) << "id " << c.id << " completed twice";
    EXPECT_EQ(c.status, static_cast<std::uint32_t>(CompletionStatus::kCompleted)) << "id " << c.id;
    EXPECT_EQ(c.steps, need->second) << "id " << c.id;
    EXPECT_EQ(c.value, expected_value_(c.id, need->second)) << "id " << c.id;
  }

  void AccountAll(absl::Span<const Completion> completions) {
    for (const Completion& c : completions) Account(c);
  }

  // Submits items 0 .. total - 1 (1 to max_steps steps each) to a running
  // engine in random chunks of 1 to max_chunk, polling after each chunk. When
  // the queue is full, the accepted prefix stays in and the refused rest is
  // forgotten and made again with the next chunk.
  void SubmitInChunks(Runtime& runtime, std::mt19937& rng, std::uint32_t kind, std::uint32_t total,
                      std::uint32_t max_chunk, std::uint32_t max_steps) {
    std::vector<Completion> out(50);
    std::uint32_t submitted = 0;
    const std::uint64_t submitted_before = runtime.stats().submitted;
    while (submitted < total) {
      const std::uint32_t chunk = std::min<std::uint32_t>(
          total - submitted, std::uniform_int_distribution<std::uint32_t>(1, max_chunk)(rng));
      const std::vector<WorkItem> items = MakeItems(rng, kind, submitted, chunk, 1, max_steps);
      const absl::Status status = runtime.Submit(items);
      if (absl::IsResourceExhausted(status)) {
        const std::uint64_t accepted = runtime.stats().submitted - submitted_before - submitted;
        for (std::uint32_t i = accepted; i < chunk; ++i) Forget(submitted + i);
        submitted += accepted;
      } else {
        BATON_ASSERT_OK(status);
        submitted += chunk;
      }
      BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime.Poll(absl::MakeSpan(out)));
      AccountAll(absl::MakeConstSpan(out.data(), n));
    }
  }

  // Polls until `count` distinct items completed, or fails after `limit`.
  void PollUntil(Runtime& runtime, size_t count,
                 std::chrono::seconds limit = std::chrono::seconds(30)) {
    const absl::Status failure = testing::PollUntil(
        runtime, [&] { return completions_.size() >= count; },
        [this](const Completion& c) { Account(c); }, {limit, 97});
    BATON_ASSERT_OK(failure);
    ASSERT_EQ(completions_.size(), count) << "completions missing after " << limit.count() << " s";
  }

  [[nodiscard]] size_t completed() const { return completions_.size(); }
  [[nodiscard]] const std::map<std::uint32_t, std::uint32_t>& needed() const { return needed_; }
  [[nodiscard]] const std::map<std::uint32_t, Completion>& completions() const {
    return completions_;
  }
  // (steps, value) per completed item: what two runs of the same work agree on.
  [[nodiscard]] std::map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> Results() const {
    std::map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> results;
    for (const auto& [id, c] : completions_) results.emplace(id, std::make_pair(c.steps, c.value));
    return results;
  }

 private:
  ExpectedValue expected_value_;
  std::map<std::uint32_t, std::uint32_t> needed_;
  std::map<std::uint32_t, Completion> completions_;
};

}  // namespace baton::testing
