#include "support/gpu_test.h"

#include <cuda_runtime_api.h>

#include "baton/device.h"
#include "baton/status.h"

namespace baton::testing {

std::string GpuUnavailableReason() {
  const absl::Status status = RequireDeviceLaunch();
  return status.ok() ? std::string() : std::string(status.message());
}

void GpuTest::SetUp() {
  const std::string reason = GpuUnavailableReason();
  if (!reason.empty()) GTEST_SKIP() << reason;
}

void GpuTest::TearDown() {
  if (IsSkipped()) return;
  const cudaError_t sync = cudaDeviceSynchronize();
  EXPECT_EQ(sync, cudaSuccess) << "device unhealthy after the test: " << cudaGetErrorName(sync);
  const cudaError_t last = cudaGetLastError();
  EXPECT_EQ(last, cudaSuccess) << "test left a pending CUDA error: " << cudaGetErrorName(last);
}

void GpuStreamTest::SetUp() {
  GpuTest::SetUp();
  if (IsSkipped()) return;
  BATON_ASSERT_OK_AND_ASSIGN(stream_, CreateStream());
}

}  // namespace baton::testing
