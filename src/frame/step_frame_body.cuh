// The bodies of the two ops that frame the decoder model's step
// (frame/step_view.h): step_begin, and the step's end as hooks of the token
// selection body (ops/step_begin.h, ops/select_and_end.h launch them on every
// path). Internal; Abseil-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda/ptx>

#include "baton/batch_policy.h"
#include "baton/step_kernel.cuh"
#include "frame/penalties.h"
#include "frame/step_view.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/select_logprobs.cuh"
#include "kernels/tile.h"

namespace baton::detail {

__device__ inline std::size_t sequence_index(const DecoderStepView& v, std::uint32_t entry,
                                             std::uint32_t token) {
  return static_cast<std::size_t>(entry) * static_cast<std::size_t>(v.config.max_context) + token;
}

// The host validates every entry it writes; the device re-checks what it
// indexes with, so a stale or forged item is refused instead of reading out
// of bounds: its entry in range, its input length the prompt's (the
// scheduler chunked it by that length), and this step's tokens inside the
// sequence (the token a step produces lands at index ran + tokens).
// `info` is the entry's row, loaded when item.id is in range.
__device__ inline bool entry_ok(const DecoderStepView& v, const WorkItem& item, std::uint32_t ran,
                                std::uint32_t tokens, const DecodeRequestInfo& info) {
  if (item.kind != kDecodeRequestKind || item.id >= v.max_requests) return false;
  const std::uint64_t total = static_cast<std::uint64_t>(info.prompt_tokens) + info.max_new_tokens;
  return info.prompt_tokens >= 1 && info.max_new_tokens >= 1 &&
         InputTokens(item) == info.prompt_tokens &&
         total <= static_cast<std::uint64_t>(v.config.max_context) &&
         static_cast<std::uint64_t>(ran) + tokens < total;
}

// On the graph path both ops are launched with programmatic dependent launch:
// they may start while the node before them (the scheduler, or the token
// selection) still runs. One block per position p = tile.x, its threads over
// the position's rows; `capacity` positions; no shared memory.
__device__ __forceinline__ void step_begin_body(DecoderStepView v, StepArgs args,
                                                std::uint32_t capacity, Tile tile) {
  const std::uint32_t p = tile.x;
  wait_for_previous_nodes();
  allow_next_node();
  if (p >= capacity) return;
  // Two dependent rounds of loads: the scheduler's outputs together, then
  // the request's entry.
  const std::uint32_t batch = args.header->batch;
  const WorkItem item = args.items[p];
  const std::uint32_t slot = args.slots[p];
  const std::uint32_t ran = args.item_tokens[p];
  const std::uint32_t tokens = args.tokens[p];
  const std::uint32_t first = args.token_offsets[p];
  if (p >= batch) return;
  // A forged count past the step's rows is cut to them (never indexed past).
  const std::uint32_t rows = tokens <= v.max_rows && first <= v.max_rows - tokens ? tokens : 0;
  DecodeRequestInfo info{};
  if (item.id < v.max_requests) info = v.requests[item.id];
  const bool ok = slot < v.max_batch && rows == tokens && entry_ok(v, item, ran, tokens, info);
  if (threadIdx.x == 0) {
    v.logit_rows[p] = rows > 0 ? first + rows - 1 : 0;
    if (!ok) {
      v.request_of[p] = kNoRequest;
      v.chunk_start[p] = -1;
      v.sequence_ids[p] = 0;
      v.sequence_steps[p] = 0;
      v.sampling[p] = PositionSampling{};  // greedy
    } else {
      v.request_of[p] = item.id;
      v.chunk_start[p] = rows > 0 ? static_cast<std::int32_t>(ran) : -1;
      v.sequence_ids[p] = info.sequence_id;
      // The index of the token this step generates (0 for the step that
      // reads the prompt's last token).
      const std::uint32_t produced = ran + tokens;
      v.sequence_steps[p] = produced >= info.prompt_tokens ? produced - info.prompt_tokens : 0;
      // Selection rewrites the row first when this step generates and the
      // request has penalties or min_tokens still masks its stop tokens.
      PositionSampling sampling = info.sampling;
      const bool generates = tokens > 0 && produced >= info.prompt_tokens;
      sampling.adjust = generates && (info.penalized != 0 ||
                                      produced - info.prompt_tokens < info.min_tokens)
                            ? 1u
                            : 0u;
      // Logprobs with the token (a forged count is cut to the records').
      const bool logprobs = generates && v.logprob_words != nullptr && sampling.logprobs != 0 &&
                            sampling.logprobs <= v.logprob_capacity + 1;
      if (!logprobs) sampling.logprobs = 0;
      v.sampling[p] = sampling;
    }
  }
  // A penalized request's slot counts: reset as its prompt starts (the
  // slot's previous request retired before this one was admitted), then
  // each chunk marks its prompt tokens. Uniform across the block.
  if (ok && info.penalized != 0 && rows > 0 && ran < info.prompt_tokens) {
    std::uint32_t* counts =
        v.token_counts + static_cast<std::size_t>(slot) * v.config.padded_vocab();
    if (ran == 0) {
      for (int i = threadIdx.x; i < v.config.padded_vocab(); i += blockDim.x) counts[i] = 0;
      __syncthreads();
    }
    for (std::uint32_t i = threadIdx.x; i < rows && ran + i < info.prompt_tokens; i += blockDim.x) {
      const std::int32_t token = v.sequences[sequence_index(v, item.id, ran + i)];
      if (token >= 0 && token < v.config.vocab) atomicOr(counts + token, kInPrompt);
    }
  }
  for (std::uint32_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const std::uint32_t r = first + i;
    if (!ok) {
      v.row_slots[r] = v.max_batch;
      v.row_positions[r] = -1;  // the layer kernels skip it
      v.row_fresh[r] = 0;
      v.in_tokens[r] = 0;
      continue;
    }
    v.row_slots[r] = slot;
    v.row_positions[r] = static_cast<std::int32_t>(ran + i);
    v.row_fresh[r] = i;
    v.in_tokens[r] = v.sequences[sequence_index(v, item.id, ran + i)];
  }
}

// The step clock: the global timer of step header->step, once per step.
__device__ inline void stamp_step(const DecoderStepView& v, const StepArgs& args) {
  if (v.step_end_ns != nullptr) {
    v.step_end_ns[args.header->step & (v.step_clock_size - 1)] = cuda::ptx::get_sreg_globaltimer();
  }
}

// What the end of position p's step needs besides its token, all final
// before the step's last node begins (the request table is host-written, the
// entry comes from step_begin, the tokens it ran from the scheduler): loaded
// before that node's wait, off the critical path.
struct PositionEnd {
  std::uint32_t entry = kNoRequest;
  DecodeRequestInfo info{};
  std::uint32_t ran = 0;     // tokens the item ran before this step
  std::uint32_t tokens = 0;  // this step's
  std::uint32_t slot = 0;    // its batch slot (valid when entry is)
};

__device__ inline PositionEnd load_position_end(const DecoderStepView& v, const StepArgs& args,
                                                std::uint32_t p) {
  PositionEnd e;
  e.entry = v.request_of[p];
  e.ran = args.item_tokens[p];
  e.tokens = args.tokens[p];
  e.slot = args.slots[p];
  if (e.entry < v.max_requests) e.info = v.requests[e.entry];
  return e;
}

// Position p's end of step, given the token the step chose for it: once the
// item has read its whole prompt, appends the token to the sequence and to
// the token stream and finishes the item on its stop token, its limit or a
// cancel (a refused item finishes with kRefusedRequest).
__device__ inline void end_position(const DecoderStepView& v, const StepArgs& args, std::uint32_t p,
                                    const PositionEnd& e, std::int32_t token) {
  if (e.entry == kNoRequest) {
    finish_item(args, p, kRefusedRequest);
    return;
  }
  const std::uint32_t produced = e.ran + e.tokens;               // the index the token lands at
  if (e.tokens == 0 || produced < e.info.prompt_tokens) return;  // still reading the prompt
  const std::uint32_t generated = produced - e.info.prompt_tokens + 1;
  v.sequences[sequence_index(v, e.entry, produced)] = token;
  if (e.info.penalized != 0 && token >= 0 && token < v.config.vocab) {
    // The only write to the slot's counts in this kernel: every read of them
    // (StepEndHooks::adjust) came before the selection this token ends.
    v.token_counts[static_cast<std::size_t>(e.slot) * v.config.padded_vocab() + token] += 1;
  }
  if (v.stream != nullptr) {
    const std::uint32_t i = generated - 1;
    // One 8-byte store into mapped memory: the host sees the word whole.
    v.stream[StreamSlot(e.entry, i, v.stream_window)] = StreamWord(i, token);
  }
  // A cancel (DecoderModel::Cancel) ends it as a stop token would: the token
  // just chosen is its last.
  bool stop = generated >= e.info.max_new_tokens || (v.cancel != nullptr && v.cancel[e.entry] != 0);
  // The host writes at most kEntryStopTokens; the bound guards a forged count.
  for (std::uint32_t i = 0; i < e.info.stop_count && i < kEntryStopTokens; ++i) {
    stop = stop || token == e.info.stop_tokens[i];
  }
  if (stop) finish_item(args, p, generated);
}

// The step ends inside the token selection kernel (select_body's hooks):
// the stamp when the selection starts (the logits are final), each
// position's end as soon as its token is chosen. One node fewer per step.
struct StepEndHooks {
  DecoderStepView v;
  StepArgs args;
  PositionEnd end{};
  __device__ void prepare(std::uint32_t p) { end = load_position_end(v, args, p); }
  __device__ void entered(const Tile& tile) const {
    if (tile.x == 0 && tile.y == 0 && threadIdx.x == 0) stamp_step(v, args);
  }
  // Whether position p's logits change before its token is chosen (the
  // same answer in every thread of p's cluster): step_begin's flag, in the
  // sampling record selection loads anyway.
  __device__ bool adjusts(std::uint32_t p) const { return v.sampling[p].adjust != 0; }
  // What position p's adjust rewrites: the request's stop tokens while
  // min_tokens masks them, and, with penalties, every token of its prompt or
  // generated so far (a nonzero count).
  struct Rewrites {
    const DecodeRequestInfo* info;
    const std::uint32_t* counts;  // the slot's
    bool mask;
    std::uint32_t stops;
    __device__ Rewrites(const DecoderStepView& v, const StepArgs& args, std::uint32_t p)
        : info(v.requests + v.request_of[p]),
          counts(v.token_counts + static_cast<std::size_t>(args.slots[p]) * v.config.padded_vocab()) {
      const std::uint32_t generated = args.item_tokens[p] + args.tokens[p] - info->prompt_tokens;
      mask = generated < info->min_tokens;
      stops = info->stop_count < kEntryStopTokens ? info->stop_count : kEntryStopTokens;
    }
    __device__ std::uint32_t count(int i) const { return info->penalized != 0 ? counts[i] : 0u; }
    __device__ bool masked(int i) const {
      bool stop = false;
      if (mask) {
        for (std::uint32_t k = 0; k < stops; ++k) stop = stop || i == info->stop_tokens[k];
      }
      return stop;
    }
  };
  // Rewrites position p's row in place (the logits buffer is the step's
  // own; `row` is selection's const view of it): this block's share of the
  // vocabulary, entries [rank, vocab) strided by blocks. The caller orders
  // these writes before every block's reads (a cluster barrier). With
  // logprobs, each rewritten logit's old value goes to raw_logits first (the
  // chosen token's logprob is the model's).
  template <class T>
  __device__ void adjust(std::uint32_t p, const T* row, unsigned rank, unsigned blocks) const {
    const Rewrites rewrites(v, args, p);
    const DecodeRequestInfo& info = *rewrites.info;
    T* raw = v.sampling[p].logprobs != 0 && v.raw_logits != nullptr
                 ? static_cast<T*>(v.raw_logits) + static_cast<std::size_t>(p) * v.config.padded_vocab()
                 : nullptr;
    T* out = const_cast<T*>(row);
    const int stride = static_cast<int>(blocks * blockDim.x);
    for (int i = static_cast<int>(rank * blockDim.x + threadIdx.x); i < v.config.vocab; i += stride) {
      const std::uint32_t c = rewrites.count(i);
      const bool stop = rewrites.masked(i);
      if ((stop || c != 0) && raw != nullptr) raw[i] = out[i];
      if (stop) {
        out[i] = decode::Storage<T>::store(-INFINITY);
      } else if (c != 0) {
        out[i] = decode::Storage<T>::store(PenalizedLogit(decode::Storage<T>::load(out[i]), c,
                                                          info.presence_penalty,
                                                          info.frequency_penalty,
                                                          info.repetition_penalty));
      }
    }
  }
  // Writes position p's logprob record (every lane of one warp; step_begin
  // set the flag only for a live position whose step generates): the lanes
  // below `count` their top entries, lane 0 the chosen token's (the model's
  // logit: adjust kept it when it rewrote it) and, last, the index the host
  // checks, each part behind a system fence so that the record is whole
  // before the token's stream word (chose, next) is seen.
  template <class T>
  __device__ void logprobs(std::uint32_t p, std::int32_t token, const T* row,
                           const decode::RowLogprobs& lp, unsigned count) const {
    const unsigned lane = threadIdx.x % 32;
    const std::uint32_t entry = v.request_of[p];
    const std::uint32_t index =
        args.item_tokens[p] + args.tokens[p] - v.requests[entry].prompt_tokens;
    volatile std::uint32_t* record =
        v.logprob_words + StreamSlot(entry, index, v.stream_window) * LogprobWords(v.logprob_capacity);
    if (lane == 0) {
      record[kLogprobIndexWord] = 0;  // a reader of the last lap's record sees it change
      __threadfence_system();
    }
    __syncwarp();
    if (lane < count) {
      record[LogprobTokenWord(lane)] =
          static_cast<std::uint32_t>(decode::logprob_entry_index(lp.entry));
      record[LogprobValueWord(v.logprob_capacity, lane)] = __float_as_uint(lp.top_logprob<T>());
    }
    if (lane == 0) {
      T x = row[token];
      if (v.sampling[p].adjust != 0 && v.raw_logits != nullptr) {
        const Rewrites rewrites(v, args, p);
        if (rewrites.count(token) != 0 || rewrites.masked(token)) {
          x = static_cast<const T*>(v.raw_logits)[static_cast<std::size_t>(p) * v.config.padded_vocab() + token];
        }
      }
      const float logit = decode::select_score<false>(decode::Storage<T>::load(x), 1.0f, 0.0f);
      record[kLogprobChosenWord] = __float_as_uint(logit - lp.lse);
    }
    __threadfence_system();
    __syncwarp();
    if (lane == 0) {
      record[kLogprobIndexWord] = index + 1;
      __threadfence_system();
    }
    __syncwarp();
  }
  __device__ void chose(std::uint32_t p, std::int32_t token) const {
    end_position(v, args, p, end, token);
  }
};

}  // namespace baton::detail
