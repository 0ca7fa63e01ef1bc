// The bucket table as the device sees it: plain structs a scheduler kernel
// indexes, and the bucket choice shared by host and device. No Abseil, so .cu
// files may include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"

namespace baton {

// One certified step graph (instantiated for device launch and uploaded).
struct DeviceBucketEntry {
  cudaGraphExec_t exec;        // only ever a DeviceGraph's handle
  std::uint32_t bucket_size;   // the largest batch this graph serves
  std::uint32_t kernel_nodes;  // metadata for schedulers and stats
};

// Passed by value to a scheduler kernel.
struct DeviceBucketTable {
  const DeviceBucketEntry* entries;  // device memory, bucket_size strictly increasing
  std::uint32_t count;

  // The index of the smallest bucket that holds `batch`, or -1 when `batch` is
  // 0 (nothing to run) or larger than the largest bucket.
  [[nodiscard]] BATON_HOST_DEVICE int choose(std::uint32_t batch) const;
};

// Binary search over increasing sizes; `size_at(i)` gives bucket i's size.
template <typename SizeAt>
[[nodiscard]] BATON_HOST_DEVICE constexpr int choose_bucket(SizeAt size_at, std::uint32_t count,
                                                            std::uint32_t batch) {
  if (batch == 0 || count == 0 || size_at(count - 1) < batch) return -1;
  std::uint32_t low = 0;
  std::uint32_t high = count - 1;
  while (low < high) {
    const std::uint32_t mid = low + (high - low) / 2;
    if (size_at(mid) >= batch) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return static_cast<int>(low);
}

BATON_HOST_DEVICE inline int DeviceBucketTable::choose(std::uint32_t batch) const {
  const DeviceBucketEntry* e = entries;
  return choose_bucket([e](std::uint32_t i) { return e[i].bucket_size; }, count, batch);
}

}  // namespace baton
