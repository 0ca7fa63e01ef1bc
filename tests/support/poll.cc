#include "support/poll.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/types/span.h"

namespace baton::testing {

absl::Status PollUntil(Runtime& runtime, const std::function<bool()>& done,
                       const std::function<void(const Completion&)>& each, const PollLoop& loop) {
  // An ASSERT that fails in `before_poll` or `each` returns from that
  // function only: stop here as the test would stop at it. (A fatal failure
  // from before the loop does not stop it.)
  const bool failed_before = ::testing::Test::HasFatalFailure();
  const auto assert_failed = [failed_before] {
    return !failed_before && ::testing::Test::HasFatalFailure();
  };
  std::vector<Completion> out(loop.batch);
  for (const Deadline deadline(loop.limit); !done() && !deadline.passed();) {
    if (loop.before_poll) {
      loop.before_poll();
      if (assert_failed()) break;
    }
    const absl::StatusOr<size_t> n = runtime.Poll(absl::MakeSpan(out));
    if (!n.ok()) return n.status();
    for (size_t i = 0; i < *n && each; ++i) {
      each(out[i]);
      if (assert_failed()) return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

Polled PollCompletions(Runtime& runtime, std::size_t count, const PollLoop& loop,
                       const std::function<void(const Completion&)>& each) {
  Polled polled;
  polled.failure = PollUntil(
      runtime, [&] { return polled.completions >= count; },
      [&](const Completion& c) {
        ++polled.completions;
        if (each) each(c);
      },
      loop);
  return polled;
}

}  // namespace baton::testing
