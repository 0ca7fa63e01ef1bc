// What the current machine offers: whether a usable CUDA device exists and
// what it is. Every GPU feature checks RequireDeviceLaunch() first so a
// machine without a GPU (or an older one) gets a Status, not a crash.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace baton {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  size_t global_memory_bytes = 0;
  int l2_cache_bytes = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // e.g. 13000
};

// The number of CUDA devices, 0 when there is no device or no driver.
[[nodiscard]] int CudaDeviceCount();

// Describes device `ordinal`, or the current device when ordinal < 0.
// kFailedPrecondition when no device or driver is present.
[[nodiscard]] absl::StatusOr<DeviceInfo> QueryDevice(int ordinal = -1);

// OK when the current device can run Baton's device-launch features
// (compute capability 9.0+, the architecture this build targets).
[[nodiscard]] absl::Status RequireDeviceLaunch();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, driver 13.0)".
[[nodiscard]] std::string Describe(const DeviceInfo& info);

}  // namespace baton
