#include "baton/device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/status.h"

namespace baton {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // No driver / no device is not an error worth keeping.
    return 0;
  }
  return count;
}

absl::StatusOr<DeviceInfo> QueryDevice(int ordinal) {
  if (CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device is visible (no GPU or no NVIDIA driver): Baton's GPU features need an "
        "NVIDIA GPU of compute capability 9.0 (H100/H200) and a CUDA 13 driver");
  }
  if (ordinal < 0) BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&ordinal));
  cudaDeviceProp prop{};
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.global_memory_bytes = prop.totalGlobalMem;
  info.l2_cache_bytes = prop.l2CacheSize;
  BATON_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&info.driver_version));
  BATON_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

absl::Status RequireDeviceLaunch() {
  BATON_ASSIGN_OR_RETURN(const DeviceInfo info, QueryDevice());
  if (info.compute_major < 9) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", Describe(info),
        " is too old: Baton is built for compute capability 9.0 (H100/H200); rebuild with "
        "-DCMAKE_CUDA_ARCHITECTURES matching your GPU or use a Hopper GPU"));
  }
  return absl::OkStatus();
}

std::string Describe(const DeviceInfo& info) {
  return absl::StrFormat("%s (sm_%d%d, %d SMs, driver %d.%d)", info.name, info.compute_major,
                         info.compute_minor, info.multiprocessors, info.driver_version / 1000,
                         (info.driver_version % 1000) / 10);
}

}  // namespace baton
