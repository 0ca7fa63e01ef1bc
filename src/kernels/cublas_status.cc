#include "kernels/cublas_status.h"

#include <cublasLt.h>

namespace baton {

absl::StatusCode CublasStatusCode(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return absl::StatusCode::kOk;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::StatusCode::kFailedPrecondition;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view call, absl::string_view file,
                          int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(CublasStatusCode(status),
                      CallFailureMessage(call, cublasLtGetStatusName(status),
                                         cublasLtGetStatusString(status), file, line));
}

}  // namespace baton
