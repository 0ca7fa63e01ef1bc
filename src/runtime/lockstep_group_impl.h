// What a LockstepGroup holds (baton/lockstep_group.h): the channel and its two
// record halves in the first rank's GPU memory. Internal to the runtime.
#pragma once

#include <cstddef>
#include <cstdint>

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

  [[nodiscard]] detail::LockstepHalves halves_view() const {
    detail::LockstepHalves h;
    h.words = halves.data();
    h.words_per_half = record_words;
    return h;
  }
};

}  // namespace baton
