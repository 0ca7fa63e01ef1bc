// One event of the device trace (RuntimeOptions::trace_capacity): what the
// scheduler decided between two steps, stamped with the GPU's global timer.
// Fixed size (32 bytes) so the device ring is a plain array the host copies
// while the loop runs. Abseil-free: the scheduler kernels write it.
#pragma once

#include <cstdint>

namespace baton {

enum class TraceEventType : std::uint32_t {
  kNone = 0,
  kStepBegin = 1,  // a = batch, b = bucket index
  kStepEnd = 2,    // the step's results were retired: a = items retired, b = batch after
  kAdmit = 3,      // a = items taken from the queue, b = batch after
  kExit = 4,       // the loop ended: a = EngineExit, b = batch at the exit
  kError = 5,      // a = the device error word (baton/device_error_word.h)
};

struct TraceEvent {
  unsigned long long time_ns = 0;  // %globaltimer
  unsigned long long step = 0;     // the step the event belongs to
  std::uint32_t sequence = 0;      // low 32 bits of the event's index since Create
  TraceEventType type = TraceEventType::kNone;
  std::uint32_t a = 0;
  std::uint32_t b = 0;
};
static_assert(sizeof(TraceEvent) == 32, "the device ring's slots are 32 bytes");

}  // namespace baton
