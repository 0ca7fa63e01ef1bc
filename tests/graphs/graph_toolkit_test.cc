// The graph toolkit's pure logic: bucket choice (host and the device code's
// shared implementation), option checks and refusal messages. No GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "baton/bucket_entry.h"
#include "baton/bucket_table.h"
#include "baton/cublaslt_matmul.h"
#include "baton/graph_validation.h"
#include "baton/step_graph.h"
#include "support/test_seed.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(BucketSizesTest, AcceptsStrictlyIncreasingPositiveSizes) {
  EXPECT_TRUE(ValidateBucketSizes(std::vector<std::uint32_t>{1, 2, 4, 128}).ok());
  EXPECT_TRUE(ValidateBucketSizes(std::vector<std::uint32_t>{7}).ok());
}

TEST(BucketSizesTest, RefusesEmptyZeroUnsortedDuplicateAndTooMany) {
  EXPECT_THAT(ValidateBucketSizes({}).message(), HasSubstr("no buckets"));
  EXPECT_THAT(ValidateBucketSizes(std::vector<std::uint32_t>{0, 1}).message(),
              HasSubstr("bucket 0 has size 0"));
  EXPECT_THAT(ValidateBucketSizes(std::vector<std::uint32_t>{1, 4, 2}).message(),
              HasSubstr("bucket 2 (2) follows 4; sort them and drop duplicates"));
  EXPECT_THAT(ValidateBucketSizes(std::vector<std::uint32_t>{1, 4, 4}).message(),
              HasSubstr("must increase strictly"));
  std::vector<std::uint32_t> many(kMaxBuckets + 1);
  for (std::uint32_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  EXPECT_THAT(ValidateBucketSizes(many).message(), HasSubstr("exceed the limit of 1024"));
}

TEST(BucketSizesTest, PowerOfTwoBucketsCoverTheMaximum) {
  EXPECT_EQ(PowerOfTwoBuckets(128), (std::vector<std::uint32_t>{1, 2, 4, 8, 16, 32, 64, 128}));
  EXPECT_EQ(PowerOfTwoBuckets(100), (std::vector<std::uint32_t>{1, 2, 4, 8, 16, 32, 64, 128}));
  EXPECT_EQ(PowerOfTwoBuckets(1), (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(PowerOfTwoBuckets(0), (std::vector<std::uint32_t>{1}));
}

TEST(ChooseBucketTest, PicksTheSmallestBucketThatHoldsTheBatch) {
  const std::vector<std::uint32_t> sizes = {1, 2, 4, 8, 16, 32, 64, 128};
  EXPECT_EQ(*ChooseBucket(sizes, 1), 0u);
  EXPECT_EQ(*ChooseBucket(sizes, 2), 1u);
  EXPECT_EQ(*ChooseBucket(sizes, 3), 2u);
  EXPECT_EQ(*ChooseBucket(sizes, 65), 7u);
  EXPECT_EQ(*ChooseBucket(sizes, 128), 7u);
  const auto too_big = ChooseBucket(sizes, 129);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(too_big.status().message(),
              HasSubstr("no bucket holds a batch of 129 (largest bucket: 128)"));
  EXPECT_EQ(ChooseBucket(sizes, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChooseBucketTest, DeviceTableChoiceMatchesALinearScanOnRandomTables) {
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 random(static_cast<std::uint32_t>(testing::TestSeed()));
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<DeviceBucketEntry> entries;
    std::vector<std::uint32_t> sizes;
    std::uint32_t size = 0;
    const int count = 1 + random() % 40;
    for (int i = 0; i < count; ++i) {
      size += 1 + random() % 9;
      sizes.push_back(size);
      entries.push_back(DeviceBucketEntry{nullptr, size, 0});
    }
    const DeviceBucketTable table{entries.data(), static_cast<std::uint32_t>(count)};
    for (std::uint32_t batch = 0; batch <= size + 2; ++batch) {
      int expected = -1;
      for (int i = 0; i < count && batch > 0; ++i) {
        if (sizes[i] >= batch) {
          expected = i;
          break;
        }
      }
      ASSERT_EQ(table.choose(batch), expected) << "batch " << batch;
      const auto host = ChooseBucket(sizes, batch);
      ASSERT_EQ(host.ok(), expected >= 0);
      if (host.ok()) ASSERT_EQ(static_cast<int>(*host), expected);
    }
  }
}

TEST(GraphValidationMessagesTest, FixesForEveryRefusedType) {
  for (const GraphLaunchMode mode : {GraphLaunchMode::kDevice, GraphLaunchMode::kHost}) {
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeKernel, mode), "");
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeMemcpy, mode), "");
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeMemset, mode), "");
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeGraph, mode), "");
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeHost, mode),
              "move host work out of the step or use a device-side kernel");
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeEventRecord, mode), kEventNodeFix);
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeWaitEvent, mode), kEventNodeFix);
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeExtSemaphoreSignal, mode), kSemaphoreNodeFix);
    EXPECT_THAT(
        std::string(RefusalFix(cudaGraphNodeTypeMemAlloc, mode)),
        HasSubstr("cuBLAS allocated a workspace during capture: pass an explicit workspace"));
    EXPECT_EQ(RefusalFix(cudaGraphNodeTypeMemFree, mode), kMemFreeNodeFix);
  }
  EXPECT_THAT(std::string(RefusalFix(cudaGraphNodeTypeConditional, GraphLaunchMode::kDevice)),
              HasSubstr("conditional graphs are for host launch (the conditional engine); "
                        "device-launched graphs may hold only kernel, memcpy, memset and "
                        "child-graph nodes"));
  EXPECT_EQ(RefusalFix(cudaGraphNodeTypeConditional, GraphLaunchMode::kHost), "");
  EXPECT_EQ(RefusalFix(cudaGraphNodeTypeEmpty, GraphLaunchMode::kHost), "");
  EXPECT_EQ(RefusalFix(cudaGraphNodeTypeEmpty, GraphLaunchMode::kDevice), kEmptyNodeFix);
}

TEST(GraphValidationMessagesTest, RefusalStatusListsEveryNode) {
  EXPECT_TRUE(RefusalStatus("g", GraphLaunchMode::kDevice, {}).ok());
  const std::vector<GraphNodeFinding> findings = {
      {cudaGraphNodeTypeHost, "node 3", std::string(kHostNodeFix)},
      {cudaGraphNodeTypeMemAlloc, "node 1 (child graph) > node 0", std::string(kMemAllocNodeFix)},
  };
  const absl::Status status = RefusalStatus("decode b=8", GraphLaunchMode::kDevice, findings);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            absl::StrCat("graph 'decode b=8' cannot be certified for device launch: 2 nodes "
                         "refused: [node 3: host node] ",
                         kHostNodeFix, "; [node 1 (child graph) > node 0: memory allocation node] ",
                         kMemAllocNodeFix));
}

TEST(GraphValidationMessagesTest, UpdateRefusalNamesTheReasonAndTheFix) {
  EXPECT_EQ(GraphUpdateRefusal("step b=4", cudaGraphExecUpdateErrorTopologyChanged),
            "graph 'step b=4' cannot be updated in place: the topology changed (node count, "
            "dependencies or exit nodes differ); certify a new DeviceGraph instead (and replace "
            "it in its bucket table)");
  EXPECT_THAT(GraphUpdateRefusal("s", cudaGraphExecUpdateErrorNodeTypeChanged),
              HasSubstr("a node changed type"));
}

TEST(LinearOptionsTest, ValidatesSizesAndRowAlignment) {
  EXPECT_TRUE(ValidateLinearOptions({8, 1024, 3072, MatmulDataType::kFloat16}).ok());
  EXPECT_TRUE(ValidateLinearOptions({1, 4, 4, MatmulDataType::kFloat32}).ok());
  EXPECT_THAT(ValidateLinearOptions({0, 8, 8}).message(), HasSubstr("must all be >= 1"));
  EXPECT_THAT(ValidateLinearOptions({1, 12, 8, MatmulDataType::kFloat16}).message(),
              HasSubstr("in_features = 12 makes rows of 24 bytes; rows must be a multiple of 16 "
                        "bytes (pad in_features to a multiple of 8)"));
  EXPECT_THAT(ValidateLinearOptions({1, 8, 6, MatmulDataType::kFloat32}).message(),
              HasSubstr("pad out_features to a multiple of 4"));
  EXPECT_EQ(MatmulEpilogueName(MatmulEpilogue::kBiasGelu), "bias+gelu");
}

}  // namespace
}  // namespace baton
