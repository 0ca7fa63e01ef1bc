// Bad input the README's catalogue lists that needs a device: moved-from
// graphs, default streams, null and misaligned buffers, moved-from cuBLASLt
// plans. Each gets a Status (code and message asserted here), and nothing
// reaches the GPU (no cuBLASLt kernel runs here, so every sanitizer tool can
// run this binary).
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "baton/bucket_table.h"
#include "baton/cublaslt_matmul.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "baton/step_graph.h"
#include "ops/host_driver.h"
#include "support/gpu_test.h"

namespace baton {
namespace {

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

using BadInputTest = testing::GpuTest;

// A certified device graph of one memset node.
absl::StatusOr<DeviceGraph> MemsetGraph(cudaStream_t stream, std::uint32_t* target) {
  CertifyOptions options;
  options.name = "memset";
  return CaptureDeviceGraph(
      stream,
      [target](cudaStream_t s) -> absl::Status {
        BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(target, 0, sizeof(std::uint32_t), s));
        return absl::OkStatus();
      },
      options);
}

TEST_F(BadInputTest, MovedFromDeviceGraphIsRefusedByLaunchAndBucketTable) {
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());
  BATON_ASSERT_OK_AND_ASSIGN(auto target, DeviceBuffer<std::uint32_t>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(DeviceGraph graph, MemsetGraph(stream.get(), target.data()));
  DeviceGraph kept = std::move(graph);
  const absl::Status launch = graph.Launch(stream.get());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(launch.code(), absl::StatusCode::kFailedPrecondition) << launch;
  EXPECT_TRUE(Contains(launch.message(), "empty (moved from)")) << launch;
  BATON_EXPECT_OK(kept.Launch(stream.get()));

  std::vector<BucketGraph> buckets;
  buckets.push_back(BucketGraph{4, std::move(graph)});  // NOLINT(bugprone-use-after-move)
  const absl::Status table = BucketTable::Create(std::move(buckets), stream.get()).status();
  EXPECT_EQ(table.code(), absl::StatusCode::kInvalidArgument) << table;
  EXPECT_TRUE(Contains(table.message(), "the graph of bucket 4 is empty")) << table;
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

TEST_F(BadInputTest, DefaultStreamsCannotBeCaptured) {
  for (cudaStream_t stream : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread}) {
    const absl::Status status =
        CaptureGraph(stream, [](cudaStream_t) { return absl::OkStatus(); }).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(Contains(status.message(), "the default stream cannot be captured")) << status;
  }
}

TEST_F(BadInputTest, CublasLtLinearRefusesNullMisalignedAndMovedFrom) {
  BATON_ASSERT_OK_AND_ASSIGN(auto context, CublasLtContext::Create());
  LinearOptions options;
  options.tokens = 4;
  options.in_features = 64;
  options.out_features = 64;
  BATON_ASSERT_OK_AND_ASSIGN(CublasLtLinear linear, CublasLtLinear::Create(context, options));
  BATON_ASSERT_OK_AND_ASSIGN(auto x, DeviceBuffer<std::uint16_t>::Create(4 * 64 + 8));
  BATON_ASSERT_OK_AND_ASSIGN(auto w, DeviceBuffer<std::uint16_t>::Create(64 * 64));
  BATON_ASSERT_OK_AND_ASSIGN(auto y, DeviceBuffer<std::uint16_t>::Create(4 * 64));
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());

  absl::Status status = linear.Enqueue(stream.get(), nullptr, w.data(), nullptr, y.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(Contains(status.message(), "must be device pointers, not null")) << status;

  status = linear.Enqueue(stream.get(), x.data() + 1, w.data(), nullptr, y.data());  // 2 bytes off
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(Contains(status.message(), "every pointer must be 16-byte aligned")) << status;

  CublasLtLinear kept = std::move(linear);
  status =
      linear.Enqueue(stream.get(), x.data(), w.data(), nullptr,  // NOLINT(bugprone-use-after-move)
                     y.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(Contains(status.message(), "moved-from plan")) << status;
  EXPECT_EQ(kept.options().tokens, 4) << "the plan moved with its options";
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

// The fallback's GEMV is a plain CUDA entry point: misaligned or null input
// is cudaErrorInvalidValue before anything launches (CudaStatus makes that
// InvalidArgument), and the runtime's last-error slot stays clean.
TEST_F(BadInputTest, DecodeGemvRefusesMisalignedAndNullBuffers) {
  BATON_ASSERT_OK_AND_ASSIGN(auto w, DeviceBuffer<std::uint16_t>::Create(64 * 64 + 8));
  BATON_ASSERT_OK_AND_ASSIGN(auto x, DeviceBuffer<std::uint16_t>::Create(4 * 64 + 8));
  BATON_ASSERT_OK_AND_ASSIGN(auto y, DeviceBuffer<std::uint16_t>::Create(4 * 64));
  BATON_ASSERT_OK_AND_ASSIGN(auto active, DeviceBuffer<std::uint32_t>::Create(1));
  DecodeBatch batch;
  batch.active = active.data();
  batch.capacity = 4;
  EXPECT_EQ(ops::Enqueue(ops::Gemv::plain(DecoderDType::kFloat16, w.data() + 1, 64, 64, x.data(),
                                          batch, y.data()),
                         nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(ops::Enqueue(ops::Gemv::plain(DecoderDType::kFloat16, w.data(), 64, 64, x.data() + 4,
                                          batch, y.data()),
                         nullptr),
            cudaErrorInvalidValue);
  DecodeBatch no_count = batch;
  no_count.active = nullptr;
  EXPECT_EQ(ops::Enqueue(ops::Gemv::plain(DecoderDType::kFloat16, w.data(), 64, 64, x.data(),
                                          no_count, y.data()),
                         nullptr),
            cudaErrorInvalidValue);
  const absl::Status status = CudaStatus(cudaErrorInvalidValue, "EnqueueGemv", __FILE__, __LINE__);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace baton
