// What a LockstepGroup holds (baton/lockstep_group.h): the channel and its two
// record halves in the first rank's GPU memory. Internal to the runtime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "baton/cuda_resources.h"
#include "baton/lockstep_group.h"
#include "scheduler/lockstep_channel.h"

namespace baton {

class LockstepGroup::Impl {
 public:
  LockstepGroupOptions options;
  std::size_t record_words = 0;
  DeviceBuffer<detail::LockstepChannel> channel;  // zeroed at creation
  DeviceBuffer<std::uint32_t> halves;             // [2][record_words]
  // Which ranks' runtimes are running (Start until Stop/Abort ends the loop),
  // set by the ranks' host threads: a rank building graphs on a GPU where
  // another rank's loop runs would wait for that loop, which waits for it
  // (Runtime::Prepare).
  std::unique_ptr<std::atomic<bool>[]> running;

  // A rank other than `rank` on `device` whose loop runs, or -1.
  [[nodiscard]] int RunningRankOn(int device, int rank) const {
    for (std::size_t r = 0; r < options.devices.size(); ++r) {
      if (static_cast<int>(r) != rank && options.devices[r] == device &&
          running[r].load(std::memory_order_acquire)) {
        return static_cast<int>(r);
      }
    }
    return -1;
  }
  void SetRunning(int rank, bool on) const { running[rank].store(on, std::memory_order_release); }

  [[nodiscard]] detail::LockstepHalves halves_view() const {
    detail::LockstepHalves h;
    h.words = halves.data();
    h.words_per_half = record_words;
    return h;
  }
};

}  // namespace baton
