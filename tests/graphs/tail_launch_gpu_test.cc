// The first device-launch test: a kernel captured into a graph instantiated for
// device launch is tail-launched from a scheduler kernel running inside another
// graph, and writes a known result.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "baton/cuda_resources.h"
#include "baton/device_error.h"
#include "support/gpu_test.h"
#include "support/output_words_test.h"
#include "tail_launch_kernels.h"

namespace baton {
namespace {

constexpr int kElements = 1000;  // not a multiple of the block size on purpose
constexpr std::uint32_t kPoison = 0xDEADBEEFu;

// words_: [0] steps run, [1] remaining steps, [2] device error word.
class TailLaunchTest : public testing::OutputWordsTest {
 protected:
  TailLaunchTest() : OutputWordsTest(kElements, kPoison) {}

  // Captures `enqueue` on the stream and instantiates it for device launch.
  template <typename Enqueue>
  absl::StatusOr<GraphExec> CaptureForDeviceLaunch(Enqueue enqueue) {
    BATON_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
    const cudaError_t enqueued = enqueue();
    cudaGraph_t raw = nullptr;
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream_.get(), &raw));
    Graph graph(raw);
    BATON_CUDA_RETURN_IF_ERROR(enqueued);
    BATON_ASSIGN_OR_RETURN(GraphExec exec,
                           InstantiateGraph(graph.get(), cudaGraphInstantiateFlagDeviceLaunch));
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec.get(), stream_.get()));
    return exec;
  }

  absl::StatusOr<GraphExec> CaptureStep() {
    return CaptureForDeviceLaunch([&] {
      return test::EnqueueWritePattern(out_.data(), kElements, seed_, words_.data() + 0,
                                       stream_.get());
    });
  }

  void ExpectPattern() {
    std::vector<std::uint32_t> host(kElements);
    BATON_ASSERT_OK(out_.CopyTo(absl::MakeSpan(host)));
    for (int i = 0; i < kElements; ++i) {
      ASSERT_EQ(host[i], test::PatternValue(seed_, i)) << "element " << i;
    }
  }

  // Sets the remaining steps to `steps`, launches the scheduler loop over
  // `step` inside a graph of its own and waits for it.
  void RunScheduler(const GraphExec& step, std::uint32_t steps) {
    ASSERT_EQ(cudaMemcpy(words_.data() + 1, &steps, sizeof(steps), cudaMemcpyHostToDevice),
              cudaSuccess);
    BATON_ASSERT_OK_AND_ASSIGN(GraphExec scheduler, CaptureForDeviceLaunch([&] {
                                 return test::EnqueueScheduleLoop(step.get(), words_.data() + 1,
                                                                  words_.data() + 2, stream_.get());
                               }));
    ASSERT_EQ(cudaGraphLaunch(scheduler.get(), stream_.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  }
};

TEST_F(TailLaunchTest, SchedulerInGraphTailLaunchesStepGraph) {
  BATON_ASSERT_OK_AND_ASSIGN(GraphExec step, CaptureStep());
  ASSERT_NO_FATAL_FAILURE(RunScheduler(step, 1));
  BATON_EXPECT_OK(DeviceErrorStatus(Words()[2], "scheduler"));
  EXPECT_EQ(Words()[0], 1u) << "the step graph must run exactly once";
  EXPECT_EQ(Words()[1], 0u);
  ExpectPattern();
}

TEST_F(TailLaunchTest, DeviceLaunchMatchesHostLaunch) {
  BATON_ASSERT_OK_AND_ASSIGN(GraphExec step, CaptureStep());
  ASSERT_EQ(cudaGraphLaunch(step.get(), stream_.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  ExpectPattern();
  EXPECT_EQ(Words()[0], 1u);
}

TEST_F(TailLaunchTest, SelfRelaunchingSchedulerRunsExactlyNSteps) {
  BATON_ASSERT_OK_AND_ASSIGN(GraphExec step, CaptureStep());
  const std::uint32_t steps = 37 + seed_ % 64;
  ASSERT_NO_FATAL_FAILURE(RunScheduler(step, steps));
  const std::vector<std::uint32_t> counters = Words();
  BATON_EXPECT_OK(DeviceErrorStatus(counters[2], "scheduler"));
  EXPECT_EQ(counters[0], steps);
  EXPECT_EQ(counters[1], 0u);
  ExpectPattern();
}

// docs/cuda-facts.md G2: a kernel that device-launches a graph must itself run inside a
// graph; launched with <<<>>> it is refused and never runs.
TEST_F(TailLaunchTest, SchedulerLaunchedOutsideAGraphIsRefusedAndRunsNothing) {
  BATON_ASSERT_OK_AND_ASSIGN(GraphExec step, CaptureStep());
  const std::uint32_t one = 1;
  ASSERT_EQ(cudaMemcpy(words_.data() + 1, &one, sizeof(one), cudaMemcpyHostToDevice), cudaSuccess);
  const cudaError_t launched =
      test::EnqueueScheduleLoop(step.get(), words_.data() + 1, words_.data() + 2, stream_.get());
  const cudaError_t synced = cudaStreamSynchronize(stream_.get());
  const cudaError_t last = cudaGetLastError();
  EXPECT_TRUE(launched == cudaErrorNotSupported || last == cudaErrorNotSupported ||
              synced == cudaErrorNotSupported)
      << "launch " << cudaGetErrorName(launched) << ", sync " << cudaGetErrorName(synced)
      << ", last " << cudaGetErrorName(last);
  const std::vector<std::uint32_t> counters = Words();
  EXPECT_EQ(counters[0], 0u) << "the step must not run";
  std::vector<std::uint32_t> host(kElements);
  BATON_ASSERT_OK(out_.CopyTo(absl::MakeSpan(host)));
  for (int i = 0; i < kElements; ++i) ASSERT_EQ(host[i], kPoison) << "element " << i;
}

}  // namespace
}  // namespace baton
