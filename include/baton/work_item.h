// The work descriptor and the queue's device-memory layout, shared by host and
// device code. No Abseil and no device intrinsics here: host .cc files include
// it to build descriptors and to own the queue's memory; the device API lives
// in baton/work_queue.cuh.
#pragma once

#include <cstdint>

#include "baton/config.h"

namespace baton {

// A fixed-width (16-byte) unit of work. `kind` values from kFirstReservedKind
// up are reserved: kInvalidKind marks "no item" (an empty pop, a lane past the
// claimed count) and kTerminateKind is the sentinel a consumer gets once the
// queue is closed and every item has been claimed. User kinds are below
// kFirstReservedKind; the queue never interprets `id` or `payload`.
struct alignas(16) WorkItem {
  static constexpr std::uint32_t kFirstReservedKind = 0xfffffff0u;
  static constexpr std::uint32_t kTerminateKind = 0xfffffffeu;
  static constexpr std::uint32_t kInvalidKind = 0xffffffffu;

  std::uint32_t kind = kInvalidKind;
  std::uint32_t id = 0;
  std::uint64_t payload = 0;

  [[nodiscard]] BATON_HOST_DEVICE static constexpr WorkItem make(std::uint32_t kind,
                                                                 std::uint32_t id,
                                                                 std::uint64_t payload) {
    WorkItem item;
    item.kind = kind;
    item.id = id;
    item.payload = payload;
    return item;
  }
  [[nodiscard]] BATON_HOST_DEVICE static constexpr WorkItem invalid() { return WorkItem{}; }
  [[nodiscard]] BATON_HOST_DEVICE static constexpr WorkItem terminate() {
    return make(kTerminateKind, 0, 0);
  }
  // A real item: something a producer pushed. Never true for the sentinels.
  [[nodiscard]] BATON_HOST_DEVICE constexpr bool is_valid() const {
    return kind < kFirstReservedKind;
  }
  [[nodiscard]] BATON_HOST_DEVICE constexpr bool is_terminate() const {
    return kind == kTerminateKind;
  }
};
static_assert(sizeof(WorkItem) == 16, "the ring moves descriptors as one 16-byte access");

// The queue's shared counters, each on its own 128-byte line so that the
// consumers' and producers' hot atomics do not contend for one L2 line.
//   head/tail:   64-bit tickets; ticket t lives in slot t & (capacity - 1).
//   items:       published items no consumer has reserved yet (may dip below
//                zero for a moment while a consumer gives back an over-claim).
//   free_slots:  slots no producer has reserved yet (same transient dips).
//   closed:      set by WorkQueue::Close (a DMA write, no SM needed).
//   error_word:  the first device error of the queue (baton/device_error_word.h).
struct WorkQueueCounters {
  alignas(128) unsigned long long head;
  alignas(128) unsigned long long tail;
  alignas(128) long long items;
  alignas(128) long long free_slots;
  alignas(128) std::uint32_t closed;
  std::uint32_t error_word;
};

// What a kernel needs to use a queue: passed by value, trivially copyable.
// Built by WorkQueue::device_view(); every pointer is device memory.
struct WorkQueueView {
  WorkQueueCounters* counters = nullptr;
  WorkItem* slots = nullptr;               // capacity descriptors
  unsigned long long* sequence = nullptr;  // capacity per-slot sequence numbers
  unsigned long long mask = 0;             // capacity - 1 (capacity is a power of two)
  std::uint32_t max_batch = 0;             // largest claim one pop makes
  std::uint32_t max_wait_spins = 0;        // bound of every wait on a slot

  [[nodiscard]] BATON_HOST_DEVICE constexpr unsigned long long capacity() const { return mask + 1; }
};

// Codes recorded with DeviceErrorSite::kQueueWait.
enum class QueueWaitCode : std::uint32_t {
  kConsumerWait = 1,  // a claimed ticket's producer did not publish in time
  kProducerWait = 2,  // a claimed slot's previous consumer did not release it in time
};

}  // namespace baton
