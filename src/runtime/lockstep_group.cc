// LockstepGroup (baton/lockstep_group.h): the channel's memory on the first
// rank's GPU, and peer access to it from every other rank's GPU.
#include "baton/lockstep_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/page_policy.h"
#include "baton/status.h"
#include "foundation/device_scope.h"
#include "lockstep_group_impl.h"
#include "scheduler/lockstep_record.h"

namespace baton {
namespace {

absl::Status Validate(const LockstepGroupOptions& o) {
  const int ranks = static_cast<int>(o.devices.size());
  if (ranks < 2 || ranks > 1 + detail::kLockstepMaxFollowers) {
    return absl::InvalidArgumentError(
        absl::StrCat("LockstepGroupOptions.devices names ", ranks, " ranks: a group has 2 to ",
                     1 + detail::kLockstepMaxFollowers, " (one GPU needs no group)"));
  }
  if (o.max_batch == 0 || o.max_tokens < o.max_batch || o.min_page_tokens == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LockstepGroupOptions: max_batch ", o.max_batch, ", max_tokens ", o.max_tokens,
                     " and min_page_tokens ", o.min_page_tokens,
                     " must be positive with max_tokens >= max_batch (the largest program's)"));
  }
  if (o.patience <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("LockstepGroupOptions.patience must be positive");
  }
  // Last, the GPUs themselves (the checks above need none).
  int gpus = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&gpus));
  for (int r = 0; r < ranks; ++r) {
    if (o.devices[r] < 0 || o.devices[r] >= gpus) {
      return absl::InvalidArgumentError(absl::StrCat("LockstepGroupOptions.devices[", r,
                                                     "] is GPU ", o.devices[r], "; ", gpus,
                                                     " are visible: name one in [0, ", gpus, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const LockstepGroup>> LockstepGroup::Create(
    const LockstepGroupOptions& options) {
  BATON_RETURN_IF_ERROR(Validate(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->running = std::make_unique<std::atomic<bool>[]>(options.devices.size());
  for (std::size_t r = 0; r < options.devices.size(); ++r) impl->running[r] = false;
  PagePolicy smallest;
  smallest.page_tokens = options.min_page_tokens;
  impl->record_words =
      detail::lockstep_record_words(options.max_batch, options.max_tokens, smallest);
  const int first = options.devices[0];
  for (std::size_t r = 1; r < options.devices.size(); ++r) {
    if (options.devices[r] == first) continue;
    BATON_RETURN_IF_ERROR(detail::EnablePeerAccess(
        options.devices[r], first, "put a lockstep group's ranks on GPUs of one NVLink domain"));
  }
  detail::DeviceScope scope(first);
  BATON_CUDA_RETURN_IF_ERROR(scope.status());
  BATON_ASSIGN_OR_RETURN(impl->channel, DeviceBuffer<detail::LockstepChannel>::Create(1));
  BATON_ASSIGN_OR_RETURN(impl->halves, DeviceBuffer<std::uint32_t>::Create(2 * impl->record_words));
  BATON_RETURN_IF_ERROR(impl->channel.Fill(0));
  BATON_RETURN_IF_ERROR(impl->halves.Fill(0));
  BATON_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return std::shared_ptr<const LockstepGroup>(new LockstepGroup(std::move(impl)));
}

LockstepGroup::LockstepGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LockstepGroup::~LockstepGroup() = default;
int LockstepGroup::ranks() const { return static_cast<int>(impl_->options.devices.size()); }
int LockstepGroup::device(int rank) const { return impl_->options.devices.at(rank); }
const LockstepGroupOptions& LockstepGroup::options() const { return impl_->options; }
std::size_t LockstepGroup::record_words() const { return impl_->record_words; }

}  // namespace baton
