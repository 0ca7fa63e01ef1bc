#include "baton/device_error.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "baton/device_error_word.h"
#include "baton/status.h"

namespace baton {
namespace {

absl::string_view SiteName(DeviceErrorSite site) {
  switch (site) {
    case DeviceErrorSite::kNone:
      return "unknown device site";
    case DeviceErrorSite::kTailLaunch:
      return "device tail launch (cudaGraphLaunch with cudaStreamGraphTailLaunch)";
    case DeviceErrorSite::kFireAndForget:
      return "device fire-and-forget launch (cudaGraphLaunch with cudaStreamGraphFireAndForget)";
    case DeviceErrorSite::kKernelLaunch:
      return "device kernel launch (dynamic parallelism)";
    case DeviceErrorSite::kQueueWait:
      return "bounded wait on a work-queue slot";
    case DeviceErrorSite::kSchedulerState:
      return "scheduler state check";
  }
  return "unknown device site";
}

}  // namespace

absl::Status DeviceErrorStatus(std::uint32_t word, absl::string_view what) {
  if (word == 0) return absl::OkStatus();
  const DeviceErrorSite site = DeviceErrorSiteOf(word);
  const std::uint32_t code = DeviceErrorCodeOf(word);
  if (site == DeviceErrorSite::kTailLaunch || site == DeviceErrorSite::kFireAndForget ||
      site == DeviceErrorSite::kKernelLaunch) {
    const auto error = static_cast<cudaError_t>(code);
    return absl::Status(CudaErrorCode(error), absl::StrCat(what, ": ", SiteName(site),
                                                           " failed with ", cudaGetErrorName(error),
                                                           " (", cudaGetErrorString(error), ")"));
  }
  return absl::InternalError(absl::StrCat(what, ": ", SiteName(site), " failed (code ", code, ")"));
}

}  // namespace baton
