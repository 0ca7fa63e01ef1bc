// The README's runtime snippet (counting_loop.cu, extracted from README.md by
// the build), run on every engine it supports: every item completes exactly
// once, after exactly its payload's steps, reporting its own id.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "baton/runtime.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

// Defined by the README's snippet.
absl::StatusOr<std::vector<baton::Completion>> RunCountingLoop(
    baton::Engine engine, const std::vector<baton::WorkItem>& items);

namespace baton {
namespace {

class ReadmeSnippetTest : public testing::GpuTest, public ::testing::WithParamInterface<Engine> {};

TEST_P(ReadmeSnippetTest, CountingLoopCompletesEveryItemOnceAfterItsSteps) {
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_int_distribution<std::uint32_t> steps(1, 40);
  std::vector<WorkItem> items;
  std::map<std::uint32_t, std::uint32_t> payload_of;
  for (std::uint32_t id = 0; id < 500; ++id) {
    const std::uint32_t payload = steps(rng);
    items.push_back(WorkItem::make(7, id, payload));
    payload_of[id] = payload;
  }
  BATON_ASSERT_OK_AND_ASSIGN(const std::vector<Completion> done,
                             RunCountingLoop(GetParam(), items));
  ASSERT_EQ(done.size(), items.size());
  std::map<std::uint32_t, int> seen;
  for (const Completion& c : done) {
    ASSERT_TRUE(payload_of.count(c.id)) << "unknown id " << c.id;
    EXPECT_EQ(++seen[c.id], 1) << "id " << c.id << " completed twice";
    EXPECT_EQ(c.status, static_cast<std::uint32_t>(CompletionStatus::kCompleted));
    EXPECT_EQ(c.steps, payload_of[c.id]) << "id " << c.id;
    EXPECT_EQ(c.value, c.id);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, ReadmeSnippetTest,
                         ::testing::Values(Engine::kTailLaunch, Engine::kConditional),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return info.param == Engine::kTailLaunch ? "TailLaunch" : "Conditional";
                         });

}  // namespace
}  // namespace baton
