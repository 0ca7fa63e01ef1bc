// Device side of the completion mailbox: the scheduler publishes retired work
// into a ring in mapped host memory that the host polls, so retiring never
// needs a host synchronization.
//
// Guarantees: records become visible to the host in publication order, each
// exactly once, and never before their contents (a system-scope release store
// publishes them). A full ring refuses (returns false) instead of overwriting
// or waiting: the caller keeps the work and retries on a later step.
#pragma once

#include <cuda/atomic>

#include "baton/completion.h"

namespace baton {

// Single producer: call from one thread at a time. Publishes all `count`
// records or none.
[[nodiscard]] __device__ inline bool mailbox_try_push(const MailboxView& view,
                                                      const Completion* records,
                                                      std::uint32_t count) {
  MailboxProducerState& producer = *view.producer;
  const unsigned long long published = producer.published;
  if (published + count - producer.consumed_seen > view.capacity()) {
    // Only now pay a read across the bus for the host's progress.
    producer.consumed_seen =
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(view.counters->consumed)
            .load(cuda::std::memory_order_acquire);
    if (published + count - producer.consumed_seen > view.capacity()) return false;
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    view.records[(published + i) & view.mask] = records[i];
  }
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(view.counters->published)
      .store(published + count, cuda::std::memory_order_release);
  producer.published = published + count;
  return true;
}

}  // namespace baton
