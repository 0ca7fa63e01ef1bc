// The request table's device layout (internal), shared by host and device code.
#pragma once

#include <cstdint>

#include "baton/decoder_config.h"

namespace baton {

// One request-table entry as the device reads it.
struct alignas(16) DecodeRequestInfo {
  std::uint32_t prompt_tokens =
      0;  // >= 1; the prompt sits at the start of the entry's sequence row
  std::uint32_t max_new_tokens = 0;  // >= 1; prompt_tokens + max_new_tokens <= max_context
  std::int32_t stop_token = -1;      // generation ends after emitting it; -1: none
  std::uint32_t pad = 0;
  std::uint64_t sequence_id = 0;  // sampling key: (seed, sequence_id, generated-token index)
  std::uint64_t pad2 = 0;
};
static_assert(sizeof(DecodeRequestInfo) == 32, "one table entry is two 16-byte loads");

}  // namespace baton
