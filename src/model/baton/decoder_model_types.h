// Plain types of the decoder model shared by host and device code (no Abseil).
#pragma once

#include <cstdint>

#include "baton/work_item.h"

namespace baton {

// WorkItem::kind of a decode request; WorkItem::id is its request-table entry
// (DecoderModel::WorkItemFor builds it).
inline constexpr std::uint32_t kDecodeRequestKind = 0x00de0001u;

// Completion::value of an item the model refused (its id is not a valid
// request-table entry); otherwise the value is the number of tokens generated.
inline constexpr std::uint32_t kRefusedRequest = 0xffffffffu;

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
