// PeerGroup (baton/peer_group.h): peer access between every pair of the
// group's devices, each rank's staging, flags and counters, and the
// all-reduce's checks.
#include "baton/peer_group.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "collective/all_reduce_view.h"
#include "collective/all_reduce_launch.h"
#include "foundation/device_scope.h"

namespace baton {

using detail::DeviceScope;

struct PeerGroup::Impl {
  struct Rank {
    int device = 0;
    DeviceBuffer<uint4> staging;
    DeviceBuffer<std::uint32_t> flags, calls, fault;
  };
  PeerGroupOptions options;
  std::vector<Rank> ranks;
  std::vector<detail::AllReduceView> views;  // by rank
  ~Impl() {
    // Each rank's buffers are freed with its device current.
    for (Rank& r : ranks) {
      DeviceScope scope(r.device);
      r = Rank{};
    }
  }
};

PeerGroup::PeerGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PeerGroup::~PeerGroup() = default;

int PeerGroup::ranks() const { return static_cast<int>(impl_->ranks.size()); }
int PeerGroup::device(int rank) const { return impl_->ranks.at(rank).device; }
std::size_t PeerGroup::max_bytes() const { return impl_->options.max_bytes; }
const detail::AllReduceView& PeerGroup::view(int rank) const { return impl_->views.at(rank); }

absl::StatusOr<std::unique_ptr<PeerGroup>> PeerGroup::Create(const PeerGroupOptions& options) {
  const std::size_t n = options.devices.size();
  if (n < 2 || n > static_cast<std::size_t>(kMaxPeerRanks)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PeerGroupOptions::devices names %u devices; a group holds 2 to %d", n, kMaxPeerRanks));
  }
  if (std::set<int>(options.devices.begin(), options.devices.end()).size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("PeerGroupOptions::devices repeats a device: ",
                                                   absl::StrJoin(options.devices, ", ")));
  }
  if (options.max_bytes == 0 || options.max_bytes % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PeerGroupOptions::max_bytes is %u; it must be a positive multiple of 16", options.max_bytes));
  }
  if (options.blocks < 1 || options.blocks > detail::kMaxAllReduceBlocks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PeerGroupOptions::blocks is %d; it must be in [1, %d]", options.blocks,
        detail::kMaxAllReduceBlocks));
  }
  if (options.wait_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("PeerGroupOptions::wait_timeout must be positive");
  }
  int count = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  for (int d : options.devices) {
    if (d < 0 || d >= count) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "PeerGroupOptions::devices names device %d; this process sees %d GPUs", d, count));
    }
  }
  for (int a : options.devices) {
    for (int b : options.devices) {
      if (a == b) continue;
      BATON_RETURN_IF_ERROR(detail::EnablePeerAccess(
          a, b, "a group needs every pair connected (NVLink or a PCIe switch)"));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const std::size_t region = (options.max_bytes / 16 + options.blocks - 1) / options.blocks;
  impl->ranks.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    Impl::Rank& rank = impl->ranks[r];
    rank.device = options.devices[r];
    DeviceScope scope(rank.device);
    BATON_CUDA_RETURN_IF_ERROR(scope.status());
    BATON_ASSIGN_OR_RETURN(rank.staging,
                           DeviceBuffer<uint4>::Create(2 * static_cast<std::size_t>(options.blocks) * region));
    BATON_ASSIGN_OR_RETURN(rank.flags, DeviceBuffer<std::uint32_t>::Create(
                                           std::size_t{detail::kMaxAllReduceBlocks} * kMaxPeerRanks));
    BATON_ASSIGN_OR_RETURN(rank.calls,
                           DeviceBuffer<std::uint32_t>::Create(detail::kMaxAllReduceBlocks));
    BATON_ASSIGN_OR_RETURN(rank.fault, DeviceBuffer<std::uint32_t>::Create(1));
    BATON_RETURN_IF_ERROR(rank.flags.Fill(0));
    BATON_RETURN_IF_ERROR(rank.calls.Fill(0));
    BATON_RETURN_IF_ERROR(rank.fault.Fill(0));
    BATON_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  }
  for (std::size_t r = 0; r < n; ++r) {
    detail::AllReduceView view;
    for (std::size_t q = 0; q < n; ++q) {
      view.staging[q] = impl->ranks[q].staging.data();
      view.flags[q] = impl->ranks[q].flags.data();
    }
    view.calls = impl->ranks[r].calls.data();
    view.fault = impl->ranks[r].fault.data();
    view.rank = static_cast<std::uint32_t>(r);
    view.ranks = static_cast<std::uint32_t>(n);
    view.blocks = static_cast<std::uint32_t>(options.blocks);
    view.region_vectors = region;
    view.wait_ns = static_cast<unsigned long long>(absl::ToInt64Nanoseconds(options.wait_timeout));
    impl->views.push_back(view);
  }
  return std::unique_ptr<PeerGroup>(new PeerGroup(std::move(impl)));
}

absl::Status PeerGroup::AllReduce(int rank, const void* in, void* out, std::size_t count,
                                  DecoderDType dtype, cudaStream_t stream) const {
  if (rank < 0 || rank >= ranks()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PeerGroup::AllReduce: rank %d of a group of %d", rank, ranks()));
  }
  const std::size_t bytes = count * 2;  // both storage types are 2 bytes
  if (count == 0 || bytes % 16 != 0 || bytes > impl_->options.max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PeerGroup::AllReduce: %u elements (%u bytes); give a positive count whose bytes are a "
        "multiple of 16 and at most max_bytes (%u)",
        count, bytes, impl_->options.max_bytes));
  }
  if (in == nullptr || out == nullptr || reinterpret_cast<std::uintptr_t>(in) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(out) % 16 != 0) {
    return absl::InvalidArgumentError(
        "PeerGroup::AllReduce: in and out must be non-null and 16-byte aligned");
  }
  DeviceScope scope(impl_->ranks[rank].device);
  BATON_CUDA_RETURN_IF_ERROR(scope.status());
  BATON_CUDA_RETURN_IF_ERROR(
      detail::LaunchAllReduce(impl_->views[rank], in, out, bytes / 16, dtype, stream));
  return absl::OkStatus();
}

absl::Status PeerGroup::CheckFaults() const {
  std::vector<int> faulted;
  for (int r = 0; r < ranks(); ++r) {
    DeviceScope scope(impl_->ranks[r].device);
    BATON_CUDA_RETURN_IF_ERROR(scope.status());
    std::uint32_t fault = 0;
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(&fault, impl_->ranks[r].fault.data(), sizeof(fault),
                                          cudaMemcpyDeviceToHost));
    if (fault != 0) faulted.push_back(r);
  }
  if (faulted.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "PeerGroup: the all-reduce of rank(s) ", absl::StrJoin(faulted, ", "),
      " gave up waiting for a peer after ", absl::FormatDuration(impl_->options.wait_timeout),
      " (a rank skipped a call or stopped); their outputs were left unwritten"));
}

}  // namespace baton
