// The request table's device layout (internal), shared by host and device code.
#pragma once

#include <cstdint>

#include "baton/decoder_config.h"
#include "kernels/decode_batch.h"

namespace baton {

// The most stop tokens a request-table entry holds (DecodeRequest's limit).
inline constexpr int kEntryStopTokens = 8;

// One request-table entry as the device reads it (three 32-byte rows).
struct alignas(16) DecodeRequestInfo {
  std::uint32_t prompt_tokens = 0;   // >= 1; the prompt sits at the start of the entry's row
  std::uint32_t max_new_tokens = 0;  // >= 1; prompt_tokens + max_new_tokens <= max_context
  std::uint32_t stop_count = 0;      // stop_tokens[0, stop_count) end generation
  std::uint32_t min_tokens = 0;      // the stop tokens are masked until this many were generated
  std::uint64_t sequence_id = 0;     // sampling key: (seed, sequence_id, generated-token index)
  float presence_penalty = 0.0f;     // SamplingParams' penalties (baton/decoder_config.h)
  float frequency_penalty = 0.0f;
  PositionSampling sampling;  // temperature, top_k, top_p, seed (greedy when all zero)
  float repetition_penalty = 1.0f;
  std::uint32_t penalized = 0;  // HasPenalties: the slot's token counts are kept and applied
  std::int32_t stop_tokens[kEntryStopTokens] = {};
};

// A batch slot's token counts while its request has penalties
// (DecoderStepView::token_counts, one word per vocabulary entry): the low
// bits count the generated occurrences, kInPrompt marks a prompt token.
inline constexpr std::uint32_t kInPrompt = 0x80000000u;
inline constexpr std::uint32_t kGeneratedCount = 0x7fffffffu;
static_assert(sizeof(DecodeRequestInfo) == 96, "one table entry is six 16-byte loads");

}  // namespace baton
