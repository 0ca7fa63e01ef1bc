#include "completion/completion_mailbox.h"

#include <algorithm>
#include <cuda/atomic>

#include "absl/strings/str_cat.h"
#include "baton/status.h"

namespace baton {
namespace {

using SystemAtomic = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;

}  // namespace

absl::StatusOr<CompletionMailbox> CompletionMailbox::Create(std::uint32_t capacity) {
  if (capacity < 2 || capacity > kMaxCapacity || (capacity & (capacity - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("completion mailbox capacity ", capacity,
                                                   " is not a power of two in [2, ", kMaxCapacity,
                                                   "]: round it up to the next power of two"));
  }
  CompletionMailbox mailbox;
  mailbox.capacity_ = capacity;
  BATON_ASSIGN_OR_RETURN(mailbox.counters_, MappedHostBuffer<MailboxCounters>::Create(1));
  BATON_ASSIGN_OR_RETURN(mailbox.records_, MappedHostBuffer<Completion>::Create(capacity));
  BATON_ASSIGN_OR_RETURN(mailbox.producer_, DeviceBuffer<MailboxProducerState>::Create(1));
  *mailbox.counters_.host() = MailboxCounters{};
  std::fill_n(mailbox.records_.host(), capacity, Completion{});
  BATON_RETURN_IF_ERROR(mailbox.producer_.Fill(0));
  BATON_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // the fill is done before any producer
  return mailbox;
}

MailboxView CompletionMailbox::device_view() const {
  MailboxView view;
  view.counters = counters_.device();
  view.records = records_.device();
  view.producer = producer_.data();
  view.mask = capacity_ - 1;
  return view;
}

std::uint64_t CompletionMailbox::published() const {
  return SystemAtomic(counters_.host()->published).load(cuda::std::memory_order_acquire);
}

size_t CompletionMailbox::Poll(absl::Span<Completion> out) {
  const std::uint64_t available = published() - consumed_;
  const size_t count = static_cast<size_t>(std::min<std::uint64_t>(available, out.size()));
  for (size_t i = 0; i < count; ++i) out[i] = records_.host()[(consumed_ + i) & (capacity_ - 1)];
  consumed_ += count;
  // Release: the device may reuse these slots only after the copies above.
  SystemAtomic(counters_.host()->consumed).store(consumed_, cuda::std::memory_order_release);
  return count;
}

}  // namespace baton
