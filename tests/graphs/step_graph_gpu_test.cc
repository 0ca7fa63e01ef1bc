// Step graphs: validation refuses every node a device-launched graph cannot
// hold (naming it and the fix) before anything reaches the GPU; certified
// graphs run the same from the host and from a device scheduler; the bucket
// table mirrors handles the scheduler indexes; graph updates apply or refuse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/device_error.h"
#include "baton/graph_validation.h"
#include "baton/step_graph.h"
#include "graph_test_kernels.h"
#include "support/gpu_test.h"
#include "support/output_words_test.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kElements = 1000;
constexpr std::uint32_t kPoison = 0xDEADBEEFu;

void CountHostCall(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

// words_: [0] batch, [1] chosen bucket, [2] device error word.
class StepGraphTest : public testing::OutputWordsTest {
 protected:
  StepGraphTest() : OutputWordsTest(kElements, kPoison) {}

  void ExpectPattern(std::uint32_t seed) {
    const std::vector<std::uint32_t> host = Out();
    for (int i = 0; i < kElements; ++i) {
      ASSERT_EQ(host[i], test::GraphPattern(seed, i)) << "element " << i;
    }
  }
  void ExpectPoison() {
    const std::vector<std::uint32_t> host = Out();
    for (int i = 0; i < kElements; ++i) ASSERT_EQ(host[i], kPoison) << "element " << i;
  }
  absl::Status EnqueuePattern(cudaStream_t stream, std::uint32_t seed) {
    return Launched(test::EnqueuePattern(out_.data(), kElements, seed, stream));
  }
};

TEST_F(StepGraphTest, RefusesHostNodeNamingItAndNothingReachesTheGpu) {
  std::atomic<int> host_calls{0};
  const auto result = CaptureDeviceGraph(
      stream_.get(),
      [&](cudaStream_t s) -> absl::Status {
        BATON_RETURN_IF_ERROR(EnqueuePattern(s, seed_));
        BATON_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(s, CountHostCall, &host_calls));
        return EnqueuePattern(s, seed_ + 1);
      },
      CertifyOptions{"host step"});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("graph 'host step' cannot be certified for device launch: 1 node refused"));
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("[node 1: host node] ", kHostNodeFix)));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host_calls.load(), 0) << "a refused graph must never run";
  ExpectPoison();
}

TEST_F(StepGraphTest, RefusesEventRecordAndWaitNodes) {
  BATON_ASSERT_OK_AND_ASSIGN(Event event, CreateEvent(cudaEventDisableTiming));
  const auto result = CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) -> absl::Status {
    BATON_RETURN_IF_ERROR(EnqueuePattern(s, seed_));
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(event.get(), s, cudaEventRecordExternal));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, event.get(), cudaEventWaitExternal));
    return absl::OkStatus();
  });
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("2 nodes refused"));
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("event record node] ", kEventNodeFix)));
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("event wait node] ", kEventNodeFix)));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectPoison();
}

TEST_F(StepGraphTest, RefusesAllocationNodeWithTheWorkspaceMessage) {
  const auto result = CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) -> absl::Status {
    void* scratch = nullptr;
    BATON_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&scratch, 4096, s));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch, 0, 4096, s));
    BATON_RETURN_IF_ERROR(EnqueuePattern(s, seed_));
    BATON_CUDA_RETURN_IF_ERROR(cudaFreeAsync(scratch, s));
    return absl::OkStatus();
  });
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("memory allocation node] ", kMemAllocNodeFix)));
  EXPECT_THAT(result.status().message(),
              HasSubstr("cuBLAS allocated a workspace during capture: pass an explicit workspace"));
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("memory free node] ", kMemFreeNodeFix)));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectPoison();
}

TEST_F(StepGraphTest, RefusesConditionalNode) {
  BATON_ASSERT_OK_AND_ASSIGN(Graph graph, CreateGraph());
  cudaGraphConditionalHandle handle{};
  ASSERT_EQ(cudaGraphConditionalHandleCreate(&handle, graph.get(), 1, cudaGraphCondAssignDefault),
            cudaSuccess);
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeIf;
  params.conditional.size = 1;
  cudaGraphNode_t node = nullptr;
  ASSERT_EQ(cudaGraphAddNode(&node, graph.get(), nullptr, nullptr, 0, &params), cudaSuccess);
  cudaGraph_t body = params.conditional.phGraph_out[0];
  ASSERT_EQ(cudaStreamBeginCaptureToGraph(stream_.get(), body, nullptr, nullptr, 0,
                                          cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  ASSERT_EQ(test::EnqueuePattern(out_.data(), kElements, seed_, stream_.get()), cudaSuccess);
  cudaGraph_t captured = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_.get(), &captured), cudaSuccess);

  const auto result = CertifyDeviceGraph(std::move(graph), stream_.get(), {"if step"});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("[node 0: conditional node] ", kConditionalNodeFix)));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectPoison();
}

TEST_F(StepGraphTest, NamesTheNodeInsideAChildGraph) {
  std::atomic<int> host_calls{0};
  BATON_ASSERT_OK_AND_ASSIGN(
      Graph child, CaptureGraph(stream_.get(), [&](cudaStream_t s) {
        BATON_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(s, CountHostCall, &host_calls));
        return absl::OkStatus();
      }));
  BATON_ASSERT_OK_AND_ASSIGN(Graph parent, CaptureGraph(stream_.get(), [&](cudaStream_t s) {
                               return EnqueuePattern(s, seed_);
                             }));
  cudaGraphNode_t node = nullptr;
  ASSERT_EQ(cudaGraphAddChildGraphNode(&node, parent.get(), nullptr, 0, child.get()), cudaSuccess);
  const auto result = CertifyDeviceGraph(std::move(parent), stream_.get());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("[node 1 (child graph) > node 0: host node] ", kHostNodeFix)));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host_calls.load(), 0);
  ExpectPoison();
}

TEST_F(StepGraphTest, EmptyGraphIsRefused) {
  BATON_ASSERT_OK_AND_ASSIGN(Graph graph, CreateGraph());
  const auto result = CertifyDeviceGraph(std::move(graph), stream_.get());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr(kNoWorkFix));
}

TEST_F(StepGraphTest, CertifiedGraphRunsTheSameFromHostAndFromADeviceScheduler) {
  BATON_ASSERT_OK_AND_ASSIGN(
      DeviceGraph step,
      CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) { return EnqueuePattern(s, seed_); }));
  EXPECT_EQ(step.inventory().kernel_nodes, 1u);
  BATON_ASSERT_OK(step.Launch(stream_.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  const std::vector<std::uint32_t> host_launched = Out();
  ExpectPattern(seed_);

  BATON_ASSERT_OK(Poison());
  BATON_ASSERT_OK_AND_ASSIGN(
      DeviceGraph scheduler, CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) {
        return Launched(test::EnqueueTailLaunch(step.handle(), words_.data() + 2, s));
      }));
  BATON_ASSERT_OK(scheduler.Launch(stream_.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  BATON_EXPECT_OK(DeviceErrorStatus(Words()[2], "scheduler"));
  EXPECT_EQ(Out(), host_launched);
}

TEST_F(StepGraphTest, BucketTableSchedulerChoosesOnDeviceAndTailLaunches) {
  const std::vector<std::uint32_t> sizes = {2, 8, 32};
  std::vector<BucketGraph> buckets;
  for (std::uint32_t i = 0; i < sizes.size(); ++i) {
    BATON_ASSERT_OK_AND_ASSIGN(DeviceGraph graph,
                               CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) {
                                 return EnqueuePattern(s, seed_ + i);
                               }));
    buckets.push_back(BucketGraph{sizes[i], std::move(graph)});
  }
  BATON_ASSERT_OK_AND_ASSIGN(BucketTable table,
                             BucketTable::Create(std::move(buckets), stream_.get()));
  BATON_ASSERT_OK_AND_ASSIGN(
      DeviceGraph scheduler, CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) {
        return Launched(test::EnqueueBucketScheduler(table.device_table(), words_.data() + 0,
                                                     words_.data() + 1, words_.data() + 2, s));
      }));
  for (const std::uint32_t batch : {1u, 2u, 3u, 8u, 9u, 32u, 33u}) {
    SCOPED_TRACE(batch);
    BATON_ASSERT_OK(Poison());
    const std::uint32_t init[3] = {batch, 0x12345678u, 0};
    ASSERT_EQ(cudaMemcpy(words_.data(), init, sizeof(init), cudaMemcpyHostToDevice), cudaSuccess);
    BATON_ASSERT_OK(scheduler.Launch(stream_.get()));
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    const std::vector<std::uint32_t> words = Words();
    BATON_ASSERT_OK(DeviceErrorStatus(words[2], "bucket scheduler"));
    const absl::StatusOr<std::uint32_t> expected = table.Choose(batch);
    if (!expected.ok()) {
      EXPECT_EQ(batch, 33u);
      EXPECT_EQ(expected.status().code(), absl::StatusCode::kNotFound);
      EXPECT_EQ(words[1], 0xFFFFFFFFu);
      ExpectPoison();
      continue;
    }
    ASSERT_EQ(words[1], *expected);
    const std::vector<std::uint32_t> device_launched = Out();
    ExpectPattern(seed_ + *expected);
    BATON_ASSERT_OK(Poison());
    BATON_ASSERT_OK(table.graph(*expected).Launch(stream_.get()));
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    EXPECT_EQ(Out(), device_launched);
  }
}

TEST_F(StepGraphTest, UpdateAppliesNewParametersAndRefusesTopologyChanges) {
  BATON_ASSERT_OK_AND_ASSIGN(
      DeviceGraph step,
      CaptureDeviceGraph(stream_.get(), [&](cudaStream_t s) { return EnqueuePattern(s, seed_); },
                         {"updatable step"}));
  std::vector<BucketGraph> buckets;
  buckets.push_back(BucketGraph{4, std::move(step)});
  BATON_ASSERT_OK_AND_ASSIGN(BucketTable table,
                             BucketTable::Create(std::move(buckets), stream_.get()));
  const cudaGraphExec_t handle = table.graph(0).handle();

  // Same topology, new parameters: applied in place, handle unchanged.
  BATON_ASSERT_OK_AND_ASSIGN(Graph same, CaptureGraph(stream_.get(), [&](cudaStream_t s) {
                               return EnqueuePattern(s, seed_ + 7);
                             }));
  BATON_ASSERT_OK(table.Update(0, std::move(same), stream_.get()));
  EXPECT_EQ(table.graph(0).handle(), handle);
  BATON_ASSERT_OK(table.graph(0).Launch(stream_.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  ExpectPattern(seed_ + 7);

  // Another node: structurally impossible, refused, the old graph still runs.
  BATON_ASSERT_OK_AND_ASSIGN(Graph bigger, CaptureGraph(stream_.get(), [&](cudaStream_t s) {
                               BATON_RETURN_IF_ERROR(EnqueuePattern(s, seed_ + 8));
                               return EnqueuePattern(s, seed_ + 9);
                             }));
  const absl::Status refused = table.Update(0, std::move(bigger), stream_.get());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("graph 'updatable step' cannot be updated in place: the topology changed"));
  BATON_ASSERT_OK(Poison());
  BATON_ASSERT_OK(table.graph(0).Launch(stream_.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  ExpectPattern(seed_ + 7);

  // A replacement that fails validation never reaches cudaGraphExecUpdate.
  std::atomic<int> host_calls{0};
  BATON_ASSERT_OK_AND_ASSIGN(
      Graph with_host, CaptureGraph(stream_.get(), [&](cudaStream_t s) {
        BATON_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(s, CountHostCall, &host_calls));
        return absl::OkStatus();
      }));
  const absl::Status invalid = table.Update(0, std::move(with_host), stream_.get());
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument) << invalid;
  EXPECT_THAT(invalid.message(), HasSubstr(kHostNodeFix));
  BATON_ASSERT_OK(Poison());
  BATON_ASSERT_OK(table.graph(0).Launch(stream_.get()));
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  ExpectPattern(seed_ + 7);
  EXPECT_EQ(host_calls.load(), 0);
}

}  // namespace
}  // namespace baton
