// The bucket table as the device sees it: plain structs a scheduler kernel
// indexes, and the bucket choice shared by host and device. No Abseil, so .cu
// files may include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/batch_policy.h"
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

BATON_HOST_DEVICE inline int DeviceBucketTable::choose(std::uint32_t batch) const {
  const DeviceBucketEntry* e = entries;
  return SmallestBucket([e](std::uint32_t i) { return e[i].bucket_size; }, count, batch);
}

}  // namespace baton
