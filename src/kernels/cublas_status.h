// cuBLAS / cuBLASLt status codes as absl::Status, like baton/status.h does
// for CUDA runtime errors. Internal to the kernels layer (the cuBLASLt
// wrappers) and its tests.
#pragma once

#include <cublas_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "baton/status.h"

namespace baton {

// The absl::StatusCode a cuBLAS status maps to.
[[nodiscard]] absl::StatusCode CublasStatusCode(cublasStatus_t status);
// "cublasLtMatmul(...) failed: CUBLAS_STATUS_INVALID_VALUE (...) at
// src/<layer>/<file>.cc:42". OkStatus for CUBLAS_STATUS_SUCCESS.
[[nodiscard]] absl::Status CublasStatus(cublasStatus_t status, absl::string_view call,
                                        absl::string_view file, int line);

}  // namespace baton

// Returns from the enclosing function when a cuBLAS/cuBLASLt call fails.
#define BATON_CUBLAS_RETURN_IF_ERROR(expr)                                           \
  do {                                                                               \
    const cublasStatus_t baton_cublas_status_ = (expr);                              \
    if (baton_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                             \
      return ::baton::CublasStatus(baton_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                \
  } while (false)
