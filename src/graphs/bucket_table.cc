#include "baton/bucket_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"

namespace baton {

absl::Status ValidateBucketSizes(absl::Span<const std::uint32_t> sizes) {
  if (sizes.empty()) {
    return absl::InvalidArgumentError("bucket table: no buckets; give at least one bucket size");
  }
  if (sizes.size() > kMaxBuckets) {
    return absl::InvalidArgumentError(absl::StrCat("bucket table: ", sizes.size(),
                                                   " buckets exceed the limit of ", kMaxBuckets,
                                                   "; use coarser buckets"));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket table: bucket ", i, " has size 0; every bucket holds >= 1 sequence"));
    }
    if (i > 0 && sizes[i] <= sizes[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket table: bucket sizes must increase strictly, but bucket ", i, " (",
                       sizes[i], ") follows ", sizes[i - 1], "; sort them and drop duplicates"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::uint32_t> PowerOfTwoBuckets(std::uint32_t max_batch) {
  std::vector<std::uint32_t> sizes;
  std::uint32_t size = 1;
  for (;;) {
    sizes.push_back(size);
    if (size >= max_batch || size >= (1u << 31)) break;
    size *= 2;
  }
  return sizes;
}

absl::StatusOr<std::uint32_t> ChooseBucket(absl::Span<const std::uint32_t> sizes,
                                           std::uint32_t batch) {
  const std::uint32_t* data = sizes.data();
  const int index = SmallestBucket([data](std::uint32_t i) { return data[i]; },
                                   static_cast<std::uint32_t>(sizes.size()), batch);
  if (index < 0) {
    if (batch == 0) return absl::InvalidArgumentError("ChooseBucket: batch 0 needs no step");
    return absl::NotFoundError(absl::StrCat(
        "no bucket holds a batch of ", batch,
        " (largest bucket: ", sizes.empty() ? 0u : sizes.back(),
        "); split the batch or add a larger bucket (the dynamic-parallelism fallback covers it)"));
  }
  return static_cast<std::uint32_t>(index);
}

absl::StatusOr<BucketTable> BucketTable::Create(std::vector<BucketGraph> buckets,
                                                cudaStream_t stream) {
  BucketTable table;
  for (const BucketGraph& bucket : buckets) {
    // A null handle in the device table would reach a device graph launch.
    if (bucket.graph.handle() == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("BucketTable::Create: the graph of bucket ", bucket.bucket_size,
                       " is empty (a moved-from DeviceGraph): pass the certified graph itself"));
    }
    table.sizes_.push_back(bucket.bucket_size);
  }
  BATON_RETURN_IF_ERROR(ValidateBucketSizes(table.sizes_));
  table.buckets_ = std::move(buckets);
  BATON_ASSIGN_OR_RETURN(table.entries_, DeviceBuffer<DeviceBucketEntry>::Create(table.size()));
  BATON_RETURN_IF_ERROR(table.Mirror(stream));
  return table;
}

absl::Status BucketTable::Mirror(cudaStream_t stream) {
  std::vector<DeviceBucketEntry> host;
  host.reserve(buckets_.size());
  for (const BucketGraph& bucket : buckets_) {
    host.push_back(
        DeviceBucketEntry{bucket.graph.handle(), bucket.bucket_size,
                          static_cast<std::uint32_t>(bucket.graph.inventory().kernel_nodes)});
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(entries_.data(), host.data(),
                                             host.size() * sizeof(DeviceBucketEntry),
                                             cudaMemcpyHostToDevice, stream));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status BucketTable::Update(std::uint32_t index, Graph replacement, cudaStream_t stream) {
  if (index >= size()) {
    return absl::OutOfRangeError(absl::StrCat("BucketTable::Update: bucket ", index,
                                              " does not exist (", size(), " buckets)"));
  }
  BATON_RETURN_IF_ERROR(buckets_[index].graph.Update(std::move(replacement), stream));
  // The handle is unchanged, but re-mirroring keeps the metadata exact.
  return Mirror(stream);
}

absl::Status BucketTable::Replace(std::uint32_t index, DeviceGraph graph, cudaStream_t stream) {
  if (index >= size()) {
    return absl::OutOfRangeError(absl::StrCat("BucketTable::Replace: bucket ", index,
                                              " does not exist (", size(), " buckets)"));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  DeviceGraph old = std::exchange(buckets_[index].graph, std::move(graph));
  return Mirror(stream);
}

}  // namespace baton
