// CPU tests of the host error conventions: CUDA/cuBLAS codes become Status
// values naming the call, the error and the place; handles release once.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>

#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/device_error.h"
#include "baton/device_error_word.h"
#include "baton/status.h"
#include "kernels/cublas_status.h"

namespace baton {
namespace {

TEST(CudaStatus, SuccessIsOk) { EXPECT_TRUE(CudaStatus(cudaSuccess, "f()", __FILE__, 1).ok()); }

TEST(CudaStatus, NamesCallErrorAndPlace) {
  const absl::Status status =
      CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "/x/y/src/runtime/foo.cc", 42);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of memory) at "
            "src/runtime/foo.cc:42");
}

TEST(CudaStatus, StickyErrorsSayTheContextIsGone) {
  const absl::Status status =
      CudaStatus(cudaErrorIllegalAddress, "cudaStreamSynchronize(s)", "/a/tests/t.cc", 7);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("cudaErrorIllegalAddress"), std::string::npos);
  EXPECT_NE(status.message().find("sticky"), std::string::npos);
  EXPECT_TRUE(IsStickyCudaError(cudaErrorLaunchFailure));
  EXPECT_FALSE(IsStickyCudaError(cudaErrorInvalidValue));
}

TEST(CudaStatus, MapsCodes) {
  EXPECT_EQ(CudaErrorCode(cudaErrorInvalidValue), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaErrorCode(cudaErrorNoDevice), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorCode(cudaErrorInsufficientDriver), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorCode(cudaErrorNotSupported), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaErrorCode(cudaErrorNotReady), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaErrorCode(cudaErrorLaunchOutOfResources), absl::StatusCode::kResourceExhausted);
}

TEST(CublasStatus, NamesCallAndError) {
  const absl::Status status =
      CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul(...)", "/r/src/kernels/g.cc", 3);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cublasLtMatmul(...) failed: CUBLAS_STATUS_INVALID_VALUE"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("src/kernels/g.cc:3"), std::string::npos) << status;
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "f", "f.cc", 1).ok());
  EXPECT_EQ(CublasStatusCode(CUBLAS_STATUS_ALLOC_FAILED), absl::StatusCode::kResourceExhausted);
}

absl::Status FailsWithCuda() {
  BATON_CUDA_RETURN_IF_ERROR(cudaErrorInvalidDevice);
  return absl::OkStatus();
}
absl::StatusOr<int> GivesSeven() { return 7; }
absl::StatusOr<int> PropagatesFailure() {
  BATON_RETURN_IF_ERROR(FailsWithCuda());
  return 1;
}
absl::StatusOr<int> AddsOne() {
  BATON_ASSIGN_OR_RETURN(const int seven, GivesSeven());
  return seven + 1;
}

TEST(StatusMacros, ReturnAndAssign) {
  const absl::Status status = FailsWithCuda();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cudaErrorInvalidDevice failed: cudaErrorInvalidDevice"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("tests/foundation/status_test.cc:"), std::string::npos) << status;
  EXPECT_EQ(PropagatesFailure().status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(AddsOne().ok());
  EXPECT_EQ(*AddsOne(), 8);
}

TEST(DeviceErrorWord, RoundTripsAndNamesTheSite) {
  EXPECT_TRUE(DeviceErrorStatus(0, "loop").ok());
  const std::uint32_t word = PackDeviceError(DeviceErrorSite::kTailLaunch, cudaErrorInvalidValue);
  EXPECT_EQ(DeviceErrorSiteOf(word), DeviceErrorSite::kTailLaunch);
  EXPECT_EQ(DeviceErrorCodeOf(word), static_cast<std::uint32_t>(cudaErrorInvalidValue));
  const absl::Status status = DeviceErrorStatus(word, "step loop");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("step loop: device tail launch"), std::string::npos) << status;
  EXPECT_NE(status.message().find("cudaErrorInvalidValue"), std::string::npos) << status;
  EXPECT_EQ(DeviceErrorStatus(PackDeviceError(DeviceErrorSite::kQueueWait, 5), "queue").code(),
            absl::StatusCode::kInternal);
}

int g_destroyed = 0;
cudaError_t FakeDestroy(int* /*handle*/) {
  ++g_destroyed;
  return cudaSuccess;
}

TEST(CudaHandle, ReleasesExactlyOnceAcrossMoves) {
  g_destroyed = 0;
  int a = 0, b = 0;
  {
    CudaHandle<int*, FakeDestroy> first(&a);
    CudaHandle<int*, FakeDestroy> second(std::move(first));
    EXPECT_FALSE(first);
    EXPECT_EQ(second.get(), &a);
    CudaHandle<int*, FakeDestroy> third(&b);
    third = std::move(second);  // destroys b's handle
    EXPECT_EQ(g_destroyed, 1);
    EXPECT_EQ(third.get(), &a);
    int* raw = third.release();
    EXPECT_EQ(raw, &a);
  }
  EXPECT_EQ(g_destroyed, 1);  // the released handle was not destroyed
}

// Honest on both kinds of machine: without a device the query must say why;
// with one it must describe it.
TEST(Device, QueryExplainsAbsenceOrDescribesDevice) {
  const absl::StatusOr<DeviceInfo> info = QueryDevice();
  if (CudaDeviceCount() == 0) {
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(info.status().message().find("no CUDA device is visible"), std::string::npos);
    EXPECT_EQ(RequireDeviceLaunch().code(), absl::StatusCode::kFailedPrecondition);
  } else {
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_FALSE(info->name.empty());
    EXPECT_GT(info->multiprocessors, 0);
  }
}

TEST(DeviceBuffer, RejectsMismatchedSpansWithoutTouchingTheDevice) {
  DeviceBuffer<int> empty;  // no allocation
  std::vector<int> host(3);
  EXPECT_EQ(empty.CopyFrom(host).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.CopyTo(absl::MakeSpan(host)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton
