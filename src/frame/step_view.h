// The decoder model's step frame: the device state a step reads and writes
// around its layers (DecoderStepView: the request table, per-row and
// per-position state, the token stream), and the layouts the host shares
// with it. Two ops frame every step (src/ops/step_begin.h and
// src/ops/select_and_end.h, bodies in frame/step_frame_body.cuh):
// step_begin turns the scheduler's batch (StepArgs: positions, each with a
// chunk of rows) into the model's inputs by row, and token selection ends the
// step by turning the chosen tokens back into sequence text, streamed tokens
// and finish_item calls. Between them run the layer ops over rows and the
// projections. Abseil-free: .cu files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/step_args.h"
#include "frame/request_table.h"
#include "kernels/decode_batch.h"

namespace baton::detail {

// Device pointers, passed by value and baked into the captured graphs.
struct DecoderStepView {
  DecoderConfig config;
  std::uint32_t max_batch = 0;     // positions and slots
  std::uint32_t max_rows = 0;      // rows one step holds (the token budget, >= max_batch)
  std::uint32_t max_requests = 0;  // request table entries
  // Request table (see DecoderModel::WriteRequests).
  const DecodeRequestInfo* requests = nullptr;  // [max_requests]
  std::int32_t* sequences = nullptr;            // [max_requests, max_context] prompt | generated
  // Per step, by row: the token it feeds, its sequence's slot, its index in
  // the sequence (-1: skip the row), the rows of its chunk before it.
  std::int32_t* in_tokens = nullptr;      // [max_rows]
  std::uint32_t* row_slots = nullptr;     // [max_rows]
  std::int32_t* row_positions = nullptr;  // [max_rows]
  std::uint32_t* row_fresh = nullptr;     // [max_rows]
  // Per step, by batch position.
  std::int32_t* out_tokens = nullptr;       // [max_batch] the token the step chose
  std::uint64_t* sequence_ids = nullptr;    // [max_batch] sampling key
  std::uint32_t* sequence_steps = nullptr;  // [max_batch] sampling step (generated so far)
  PositionSampling* sampling = nullptr;     // [max_batch] the request's sampling parameters
  std::uint32_t* request_of = nullptr;      // [max_batch] entry, or kNoRequest when refused
  std::uint32_t* logit_rows = nullptr;      // [max_batch] the row the position's logits read
  std::int32_t* chunk_start = nullptr;      // [max_batch] its chunk's first index (-1: none)
  // Step clock: globaltimer when step s's token selection starts (its logits
  // are final) lands in step_end_ns[s % step_clock_size].
  unsigned long long* step_end_ns = nullptr;
  std::uint32_t step_clock_size = 0;  // power of two
  // The token stream (mapped host memory, DecoderModel::ReadStream): entry
  // e's generated token i lands in stream[e * stream_window + i %
  // stream_window] as (i + 1) << 32 | token, one 8-byte store, so the host
  // reads each word whole and knows which token it holds.
  unsigned long long* stream = nullptr;
  std::uint32_t stream_window = 0;  // power of two
  // Cancel flags (device memory, set by DecoderModel::Cancel while steps
  // run): a nonzero cancel[e] finishes entry e's item at its next generated
  // token.
  const volatile std::uint32_t* cancel = nullptr;
  // Token counts by batch slot ([max_batch, padded_vocab], request_table.h's
  // kInPrompt | generated count), kept only for a slot whose request has
  // penalties: reset and marked with the prompt by step_begin as the prompt
  // is read, counted by the step's end, read by token selection.
  std::uint32_t* token_counts = nullptr;
  // Logprobs (DecodeRequest::logprobs; null when max_logprobs is 0): entry
  // e's generated token i has its record of LogprobWords(capacity) words at
  // logprob_words + StreamSlot(e, i, stream_window) * that, in mapped host
  // memory beside the token stream (LogprobRecord below), written before the
  // token's stream word. raw_logits ([max_batch, padded_vocab] of the
  // logits' type) keeps, for a position with logprobs and penalties, the
  // model's value of each logit the penalties rewrite.
  std::uint32_t* logprob_words = nullptr;
  std::uint32_t logprob_capacity = 0;  // top alternatives a record holds (max_logprobs)
  void* raw_logits = nullptr;
};

inline constexpr std::uint32_t kNoRequest = 0xffffffffu;

// step_begin: a block per position, a thread per row.
inline constexpr int kStepFrameThreads = 128;

// Whether a bucket of `rows` rows is a chunk step (GEMMs, the append of every
// row, chunk attention) rather than a decode step (the decode kernels): above
// max_batch rows. The graph path's plans (AttentionFor) and the device step
// both choose by it.
BATON_HOST_DEVICE constexpr bool IsChunkStep(std::uint32_t rows, std::uint32_t max_batch) {
  return rows > max_batch;
}

// The token stream's layout, for the device that writes it and the host that
// reads it (src/model/token_stream.cc): where entry e's token i lands, and the word that
// holds it ((i + 1) << 32 | token; 0 is an empty slot).
BATON_HOST_DEVICE constexpr std::size_t StreamSlot(std::uint32_t entry, std::uint32_t index,
                                                   std::uint32_t window) {
  return static_cast<std::size_t>(entry) * window + (index & (window - 1));
}
BATON_HOST_DEVICE constexpr unsigned long long StreamWord(std::uint32_t index, std::int32_t token) {
  return (static_cast<unsigned long long>(index) + 1) << 32 | static_cast<std::uint32_t>(token);
}
BATON_HOST_DEVICE constexpr std::uint32_t StreamWordIndexPlusOne(unsigned long long word) {
  return static_cast<std::uint32_t>(word >> 32);
}
BATON_HOST_DEVICE constexpr std::int32_t StreamWordToken(unsigned long long word) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(word));
}

// A logprob record's layout (words of 4 bytes): [0] the token's index + 1
// (0 while it is written: the host reads it before and after the rest, and
// takes the record only when both say its token), [1] the chosen token's
// logprob (float bits), then `capacity` top tokens and `capacity` top
// logprobs, of which the request's count are written.
BATON_HOST_DEVICE constexpr std::size_t LogprobWords(std::uint32_t capacity) {
  return 2 + 2 * static_cast<std::size_t>(capacity);
}
inline constexpr std::size_t kLogprobIndexWord = 0;
inline constexpr std::size_t kLogprobChosenWord = 1;
BATON_HOST_DEVICE constexpr std::size_t LogprobTokenWord(std::uint32_t j) { return 2 + j; }
BATON_HOST_DEVICE constexpr std::size_t LogprobValueWord(std::uint32_t capacity, std::uint32_t j) {
  return 2 + static_cast<std::size_t>(capacity) + j;
}

}  // namespace baton::detail
