// The device state of the decoder model's step and the two kernels that frame
// it: step_begin turns the scheduler's batch (StepArgs: positions, each with
// a chunk of rows) into the model's inputs by row, the token selection
// kernel ends the step by turning the chosen tokens back into sequence text,
// streamed tokens and finish_item calls. Between them run the layer kernels
// (kernels/decode_kernels.h) over rows and the projections. Abseil-free: .cu
// files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/step_args.h"
#include "decoder_model_types.h"
#include "kernels/decode_kernels.h"

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
};

inline constexpr std::uint32_t kNoRequest = 0xffffffffu;

// Whether a bucket of `rows` rows is a chunk step (GEMMs, the append of every
// row, chunk attention) rather than a decode step (the decode kernels): above
// max_batch rows. The graph path's plans (AttentionFor) and the
// dynamic-parallelism step both choose by it.
BATON_HOST_DEVICE constexpr bool IsChunkStep(std::uint32_t rows, std::uint32_t max_batch) {
  return rows > max_batch;
}

// The token stream's layout, for the device that writes it and the host that
// reads it (token_stream.cc): where entry e's token i lands, and the word that
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

// step_begin: for every live position p, validates the item's request entry
// (the item's input length must be its prompt's), and for each of its
// tokens[p] rows sets the row's slot, sequence index (the tokens the item ran
// before, plus the row's place in the chunk), fresh count and input token
// (the prompt's, then the last generated one); sets the position's logits
// row (its last row), chunk start, sampling key and parameters. A refused
// item's rows get index -1, which the layer kernels skip, and step_end
// finishes it with kRefusedRequest. One block per position.
[[nodiscard]] cudaError_t EnqueueStepBegin(const DecoderStepView& view, const StepArgs& args,
                                           std::uint32_t capacity, cudaStream_t stream);

// Token selection with each position's own sampling parameters
// (EnqueueSamplePositions, view.sampling, into view.out_tokens) and the
// step's end in the same kernel: for every live position whose step produced
// a new token (its chunk reached the prompt's end, and every step after),
// appends the token to the sequence and the token stream, and finishes the
// item on one of its stop tokens or at max_new_tokens (value: tokens
// generated); stamps the step clock. `batch` covers the step's positions
// (active = &header->batch).
[[nodiscard]] cudaError_t EnqueueSelectAndEndStep(const DecoderStepView& view, const StepArgs& args,
                                                  const void* logits, DecodeBatch batch,
                                                  cudaStream_t stream);

}  // namespace baton::detail
