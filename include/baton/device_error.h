// Turns a device error word (baton/device_error_word.h) into a Status.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace baton {

// OK for 0; otherwise a Status naming what failed on the device and the CUDA
// error it returned, e.g. "step loop: device tail launch failed with
// cudaErrorInvalidValue (...)". `what` says whose word it was.
[[nodiscard]] absl::Status DeviceErrorStatus(std::uint32_t word, absl::string_view what);

}  // namespace baton
