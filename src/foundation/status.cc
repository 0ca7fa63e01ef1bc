#include "baton/status.h"

#include "absl/strings/str_cat.h"

namespace baton {

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

absl::StatusCode CudaErrorCode(cudaError_t error) {
  if (IsStickyCudaError(error)) return absl::StatusCode::kInternal;
  switch (error) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidSymbol:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidMemcpyDirection:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorMemoryAllocation:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorLaunchPendingCountExceeded:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorNotSupported:
    case cudaErrorNotPermitted:
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorGraphExecUpdateFailure:
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kFailedPrecondition;
    case cudaErrorNotReady:
      return absl::StatusCode::kUnavailable;
    case cudaErrorTimeout:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::string_view ProjectRelativePath(absl::string_view file) {
  for (absl::string_view root : {"/src/", "/tests/", "/samples/"}) {
    const size_t pos = file.rfind(root);
    if (pos != absl::string_view::npos) return file.substr(pos + 1);
  }
  const size_t slash = file.rfind('/');
  return slash == absl::string_view::npos ? file : file.substr(slash + 1);
}

std::string CallFailureMessage(absl::string_view call, absl::string_view error_name,
                               absl::string_view error_text, absl::string_view file, int line) {
  return absl::StrCat(call, " failed: ", error_name, " (", error_text, ") at ",
                      ProjectRelativePath(file), ":", line);
}

absl::Status CudaStatus(cudaError_t error, absl::string_view call, absl::string_view file,
                        int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message =
      CallFailureMessage(call, cudaGetErrorName(error), cudaGetErrorString(error), file, line);
  if (IsStickyCudaError(error)) {
    absl::StrAppend(&message,
                    "; this error is sticky: the CUDA context is unusable, restart the process");
  }
  return absl::Status(CudaErrorCode(error), message);
}

}  // namespace baton
