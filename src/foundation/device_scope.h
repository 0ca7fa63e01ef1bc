// Scoped device selection and peer access between two GPUs, for the layers
// that set up several GPUs from one host thread (collective/peer_group.cc,
// runtime/lockstep_group.cc). Internal.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "baton/status.h"

namespace baton::detail {

// Makes `device` current for its scope and restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  [[nodiscard]] cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// Lets GPU `from` load and store GPU `to`'s memory (already enabled: fine).
// FailedPrecondition naming both and `fix` where the two have no peer access.
// Each pair is enabled once per process: asking again fails with
// cudaErrorPeerAccessAlreadyEnabled, which compute-sanitizer counts as an
// error even when cleared (H200, 2026-11-28: 6 reported on the lockstep
// channel test's repeated groups).
[[nodiscard]] inline absl::Status EnablePeerAccess(int from, int to, absl::string_view fix) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> enabled_pairs;
  const std::lock_guard<std::mutex> lock(mutex);
  if (enabled_pairs.count({from, to}) != 0) return absl::OkStatus();
  int can = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can, from, to));
  if (can == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", from, " cannot access device ", to,
                     "'s memory (no peer access between them): ", fix));
  }
  DeviceScope scope(from);
  BATON_CUDA_RETURN_IF_ERROR(scope.status());
  const cudaError_t enabled = cudaDeviceEnablePeerAccess(to, 0);
  if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // enabled outside Baton (e.g. by PyTorch): fine
  } else {
    BATON_CUDA_RETURN_IF_ERROR(enabled);
  }
  enabled_pairs.insert({from, to});
  return absl::OkStatus();
}

}  // namespace baton::detail
