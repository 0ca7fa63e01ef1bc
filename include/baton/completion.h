// Completions: what the device reports to the host when it retires work, and
// the layout of the mailbox they travel through. Shared by host and device
// code; no Abseil, no device intrinsics (src/completion/completion_mailbox.cuh
// has the device side, src/completion/completion_mailbox.h the host side).
#pragma once

#include <cstdint>

#include "baton/config.h"

namespace baton {

enum class CompletionStatus : std::uint32_t {
  kCompleted = 1,  // the work finished normally
  kAborted = 2,    // Runtime::Abort ended it while in flight
};

// One retired work item (16 bytes).
struct alignas(16) Completion {
  std::uint32_t id = 0;      // the WorkItem's id
  std::uint32_t status = 0;  // a CompletionStatus
  std::uint32_t steps = 0;   // steps the item took part in
  std::uint32_t value = 0;   // the step program's result (e.g. tokens produced)
};
static_assert(sizeof(Completion) == 16, "completions travel as 16-byte records");

// Lives in mapped pinned host memory. `published` is written only by the
// device, `consumed` only by the host; each on its own cache line so neither
// side's stores disturb the other's reads.
struct MailboxCounters {
  alignas(64) unsigned long long published;
  alignas(64) unsigned long long consumed;
};

// The producer's private bookkeeping, in device memory: the device never
// re-reads its own count across PCIe and refreshes its view of `consumed` only
// when the ring looks full.
struct MailboxProducerState {
  unsigned long long published;
  unsigned long long consumed_seen;
};

// What a device producer needs; passed by value. Single producer (the
// scheduler), single consumer (the host).
struct MailboxView {
  MailboxCounters* counters = nullptr;       // mapped host memory, device pointer
  Completion* records = nullptr;             // mapped host memory, device pointer
  MailboxProducerState* producer = nullptr;  // device memory
  unsigned long long mask = 0;               // capacity - 1 (a power of two)

  [[nodiscard]] BATON_HOST_DEVICE constexpr unsigned long long capacity() const { return mask + 1; }
};

}  // namespace baton
