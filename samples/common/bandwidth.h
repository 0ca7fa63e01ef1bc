// HBM bandwidth the samples' floors divide by: a device-to-device copy
// (cudaMemcpyAsync, read + write bytes) and a pure-read stream (a GEMV only
// reads its weights). Each is the median of repeated 1 GiB passes after a
// warm-up; a floor uses the better of the two.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"

namespace baton::samples {

struct HbmBandwidth {
  double copy_bytes_per_s = 0;  // read + write bytes moved per second
  double read_bytes_per_s = 0;  // bytes read per second, nothing written
  [[nodiscard]] double best() const {
    return copy_bytes_per_s > read_bytes_per_s ? copy_bytes_per_s : read_bytes_per_s;
  }
};

// Allocates two 1 GiB buffers for the duration of the call.
[[nodiscard]] absl::StatusOr<HbmBandwidth> MeasureHbmBandwidth(cudaStream_t stream);

}  // namespace baton::samples
