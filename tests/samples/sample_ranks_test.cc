// The samples' --tp refusals, before anything loads: the size's range and
// the GPUs visible (samples/common/ranks.h), and the drivers decode_loop
// refuses to split (samples/decode_loop/drivers.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>

#include "baton/decoder_model.h"
#include "baton/peer_group.h"
#include "common/ranks.h"
#include "decode_loop/drivers.h"

namespace baton::samples {
namespace {

using ::testing::HasSubstr;

TEST(SampleRanks, ASizeOutsideTheRangeIsRefusedNamingIt) {
  for (int n : {0, -1, kMaxPeerRanks + 1}) {
    const auto ranks = LoadRanks(DecoderModelOptions{}, n);
    ASSERT_FALSE(ranks.ok()) << n;
    EXPECT_EQ(ranks.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ranks.status().message()),
                HasSubstr("--tp=" + std::to_string(n) + ": use 1 to 8"));
  }
}

TEST(SampleRanks, MoreRanksThanGpusIsRefusedNamingBoth) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus >= kMaxPeerRanks) GTEST_SKIP() << gpus << " GPUs visible: the size fits";
  const auto ranks = LoadRanks(DecoderModelOptions{}, kMaxPeerRanks);
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ranks.status().message()),
              HasSubstr("--tp=8: " + std::to_string(gpus) + " GPU(s) are visible; use at most"));
}

TEST(SampleDrivers, DynamicParallelismIsRefusedWhenSplitAndAllowedOnOneGpu) {
  const auto split = ParseEngines("host,tail,dp", "gemv", 2);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(split.status().message()),
              HasSubstr("drop dp from --engines, or --tp=1"));

  const auto one = ParseEngines("host,tail,dp", "gemv", 1);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 3u);
  EXPECT_EQ((*one)[2].engine, Engine::kDynamicParallelism);

  const auto graphs = ParseEngines("host,tail,conditional2", "auto", 4);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  EXPECT_EQ((*graphs)[2].conditional_steps_per_iteration, 2u);
}

TEST(SampleDrivers, TheHostLoopMustComeFirst) {
  const auto engines = ParseEngines("tail,host", "auto", 1);
  ASSERT_FALSE(engines.ok());
  EXPECT_THAT(std::string(engines.status().message()), HasSubstr("must start with host"));
}

}  // namespace
}  // namespace baton::samples
