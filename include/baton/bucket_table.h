// Step graphs keyed by batch-size bucket, certified once and mirrored to device
// memory as DeviceBucketEntry structs a device scheduler indexes (pick a bucket
// with DeviceBucketTable::choose, tail-launch its exec).
//
// Only DeviceGraphs enter a table, so only handles instantiated for device
// launch ever reach device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/bucket_entry.h"
#include "baton/cuda_resources.h"
#include "baton/step_graph.h"

namespace baton {

// The most buckets a table holds (a scheduler searches them every step).
inline constexpr std::uint32_t kMaxBuckets = 1024;

// OK when `sizes` is non-empty, at most kMaxBuckets long, every size >= 1 and
// strictly increasing (pure; CPU-testable).
[[nodiscard]] absl::Status ValidateBucketSizes(absl::Span<const std::uint32_t> sizes);

// 1, 2, 4, ... up to and including the first power of two >= max_batch.
[[nodiscard]] std::vector<std::uint32_t> PowerOfTwoBuckets(std::uint32_t max_batch);

// Host side of the same choice the device makes: the index of the smallest
// bucket >= batch; NotFound naming the largest bucket when none holds it.
[[nodiscard]] absl::StatusOr<std::uint32_t> ChooseBucket(absl::Span<const std::uint32_t> sizes,
                                                         std::uint32_t batch);

struct BucketGraph {
  std::uint32_t bucket_size = 0;
  DeviceGraph graph;
};

class BucketTable {
 public:
  // Takes the graphs (sorted by bucket size as given), checks the sizes and
  // mirrors the entries to device memory on `stream` (synchronized).
  [[nodiscard]] static absl::StatusOr<BucketTable> Create(std::vector<BucketGraph> buckets,
                                                          cudaStream_t stream);
  BucketTable(BucketTable&&) noexcept = default;
  BucketTable& operator=(BucketTable&&) noexcept = default;

  [[nodiscard]] DeviceBucketTable device_table() const {
    return DeviceBucketTable{entries_.data(), static_cast<std::uint32_t>(entries_.size())};
  }
  [[nodiscard]] std::uint32_t size() const { return static_cast<std::uint32_t>(buckets_.size()); }
  [[nodiscard]] const std::vector<std::uint32_t>& bucket_sizes() const { return sizes_; }
  [[nodiscard]] const DeviceGraph& graph(std::uint32_t index) const {
    return buckets_[index].graph;
  }
  [[nodiscard]] absl::StatusOr<std::uint32_t> Choose(std::uint32_t batch) const {
    return ChooseBucket(sizes_, batch);
  }

  // Applies `replacement` to bucket `index` through graph update and re-upload
  // (DeviceGraph::Update); the handle stays, so the device mirror stays valid.
  // FailedPrecondition when the update is structurally impossible: then
  // certify a new graph and Replace(). No step may run meanwhile.
  [[nodiscard]] absl::Status Update(std::uint32_t index, Graph replacement, cudaStream_t stream);
  // Swaps in a new certified graph for bucket `index` and re-mirrors the table.
  // Synchronizes `stream` before the old graph is destroyed.
  [[nodiscard]] absl::Status Replace(std::uint32_t index, DeviceGraph graph, cudaStream_t stream);

 private:
  BucketTable() = default;
  absl::Status Mirror(cudaStream_t stream);

  std::vector<BucketGraph> buckets_;
  std::vector<std::uint32_t> sizes_;
  DeviceBuffer<DeviceBucketEntry> entries_;
};

}  // namespace baton
