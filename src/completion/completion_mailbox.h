// Host side of the completion mailbox (device side: completion/completion_mailbox.cuh):
// a ring of Completion records in mapped pinned memory. The device publishes,
// the host polls with plain loads; no stream synchronization is involved.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/completion.h"
#include "baton/cuda_resources.h"

namespace baton {

class CompletionMailbox {
 public:
  static constexpr std::uint32_t kMaxCapacity = 1u << 24;

  // An empty mailbox (no memory); Create makes a usable one.
  CompletionMailbox() = default;
  // `capacity` records: a power of two in [2, kMaxCapacity].
  [[nodiscard]] static absl::StatusOr<CompletionMailbox> Create(std::uint32_t capacity);

  // What a device producer is given (by value, e.g. as a kernel argument).
  [[nodiscard]] MailboxView device_view() const;

  // Moves up to out.size() new completions into `out`, oldest first, and frees
  // their slots for the device. Returns how many. Never blocks. One consumer
  // thread at a time.
  size_t Poll(absl::Span<Completion> out);

  // Records the device has published / the host has consumed so far.
  [[nodiscard]] std::uint64_t published() const;
  [[nodiscard]] std::uint64_t consumed() const { return consumed_; }
  [[nodiscard]] std::uint32_t capacity() const { return capacity_; }

 private:
  MappedHostBuffer<MailboxCounters> counters_;
  MappedHostBuffer<Completion> records_;
  DeviceBuffer<MailboxProducerState> producer_;
  std::uint32_t capacity_ = 0;
  std::uint64_t consumed_ = 0;
};

}  // namespace baton
