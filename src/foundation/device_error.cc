#include "baton/device_error.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "baton/device_error_word.h"
#include "baton/status.h"
#include "foundation/enum_table.h"

namespace baton {
namespace {

// Each site once: its words in messages, and whether its code is the
// cudaError_t of a refused device launch (else a code of Baton's own).
struct SiteRow {
  DeviceErrorSite value;
  absl::string_view name;
  bool cuda_error;
};
constexpr SiteRow kSites[] = {
    {DeviceErrorSite::kNone, "unknown device site", false},
    {DeviceErrorSite::kTailLaunch,
     "device tail launch (cudaGraphLaunch with cudaStreamGraphTailLaunch)", true},
    {DeviceErrorSite::kFireAndForget,
     "device fire-and-forget launch (cudaGraphLaunch with cudaStreamGraphFireAndForget)", true},
    {DeviceErrorSite::kKernelLaunch, "device kernel launch (dynamic parallelism)", true},
    {DeviceErrorSite::kQueueWait, "bounded wait on a work-queue slot", false},
    {DeviceErrorSite::kSchedulerState, "scheduler state check", false},
    {DeviceErrorSite::kLockstep, "tensor-parallel lockstep", false},
};

}  // namespace

absl::Status DeviceErrorStatus(std::uint32_t word, absl::string_view what) {
  if (word == 0) return absl::OkStatus();
  const SiteRow* site = FindRow(kSites, DeviceErrorSiteOf(word));
  if (site == nullptr) site = &kSites[0];  // kNone's words
  const std::uint32_t code = DeviceErrorCodeOf(word);
  if (site->cuda_error) {
    const auto error = static_cast<cudaError_t>(code);
    return absl::Status(CudaErrorCode(error), absl::StrCat(what, ": ", site->name, " failed with ",
                                                           cudaGetErrorName(error), " (",
                                                           cudaGetErrorString(error), ")"));
  }
  if (site->value == DeviceErrorSite::kLockstep) {
    // The channel names the rank that faulted, or that rank 0 waited for in vain.
    return absl::AbortedError(absl::StrCat(
        what, ": ", site->name, ": rank ", code,
        " faulted or stopped following rank 0's steps; every rank's loop ended (check that rank's "
        "runtime for its own error, and that every rank's runtime was started)"));
  }
  return absl::InternalError(absl::StrCat(what, ": ", site->name, " failed (code ", code, ")"));
}

}  // namespace baton
