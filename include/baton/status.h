// Error handling at every host boundary: CUDA and cuBLAS return codes become
// absl::Status values that name the failing call, the error and where it was.
//
// Host-only header (Abseil stays out of .cu files). Device code reports
// errors through plain error words that host code converts with these helpers.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

// The absl::StatusCode a CUDA runtime error maps to. Sticky errors (the
// context is unusable afterwards) map to kInternal.
[[nodiscard]] absl::StatusCode CudaErrorCode(cudaError_t error);

// True for errors after which the CUDA context is poisoned: every later call
// in this process fails, so callers must stop using the device.
[[nodiscard]] bool IsStickyCudaError(cudaError_t error);

// "cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of memory) at
// src/<layer>/<file>.cc:42". OkStatus for cudaSuccess.
[[nodiscard]] absl::Status CudaStatus(cudaError_t error, absl::string_view call,
                                      absl::string_view file, int line);

// Trims an absolute __FILE__ to the project-relative part ("src/<layer>/<file>.cc").
[[nodiscard]] absl::string_view ProjectRelativePath(absl::string_view file);

// How every failed library call reads (CudaStatus, the cuBLAS wrappers):
// "<call> failed: <error_name> (<error_text>) at src/<layer>/<file>.cc:42".
[[nodiscard]] std::string CallFailureMessage(absl::string_view call, absl::string_view error_name,
                                             absl::string_view error_text, absl::string_view file,
                                             int line);

}  // namespace baton

#define BATON_STATUS_CONCAT_INNER_(a, b) a##b
#define BATON_STATUS_CONCAT_(a, b) BATON_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function (Status or StatusOr) when a CUDA call fails.
// The runtime's last-error slot is cleared for non-sticky errors: the failure
// now lives in the Status, and a user's later cudaGetLastError() must not
// blame their own launch for it.
#define BATON_CUDA_RETURN_IF_ERROR(expr)                                            \
  do {                                                                              \
    const cudaError_t baton_cuda_error_ = (expr);                                   \
    if (baton_cuda_error_ != cudaSuccess) {                                         \
      if (!::baton::IsStickyCudaError(baton_cuda_error_)) (void)cudaGetLastError(); \
      return ::baton::CudaStatus(baton_cuda_error_, #expr, __FILE__, __LINE__);     \
    }                                                                               \
  } while (false)

// Propagates a non-OK absl::Status.
#define BATON_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status baton_status_ = (expr);         \
    if (!baton_status_.ok()) return baton_status_; \
  } while (false)

// BATON_ASSIGN_OR_RETURN(auto x, MakeX()); propagates the error of a StatusOr.
#define BATON_ASSIGN_OR_RETURN(lhs, expr) \
  BATON_ASSIGN_OR_RETURN_IMPL_(BATON_STATUS_CONCAT_(baton_statusor_, __LINE__), lhs, expr)
#define BATON_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
