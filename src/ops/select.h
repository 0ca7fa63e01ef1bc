// Token selection on its own (kernels/select_body.cuh): argmax, Gumbel-max
// sampling, or each position's own parameters with top-k / top-p. The
// decoder's step runs it fused with the step's end (ops/select_and_end.h);
// this op serves callers that select from logits they made themselves.
//
// - argmax: tokens[p] = argmax_i logits[p][i] (logits [capacity,
//   padded_vocab]). Ties go to the lowest index; NaN counts as -inf (so a
//   row of NaNs yields token 0).
// - sample: seeded sampling with the Gumbel-max trick: tokens[p] = argmax_i
//   (logits[p][i] / temperature + g_i), g_i = -log(-log(u_i)), which draws
//   from softmax(logits / temperature). u_i comes from curand's stateless
//   Philox 4x32-10: curand_init(seed, subsequence = sequence_ids[p], offset
//   = step * vocab + i) then one curand() call, whose 32 bits b give u =
//   ((b >> 9) + 0.5) * 2^-23 (exact in fp32, strictly inside (0, 1)). So a
//   token depends only on (seed, sequence id, the sequence's step, logits):
//   not on batch position, bucket or engine, and steps of one sequence never
//   reuse a counter. temperature <= 0 means greedy (argmax's rule, ties
//   included). top_k and top_p filter the tokens first, as sample_positions
//   describes (one set of parameters for every position).
// - sample_positions: params, sequence_ids and sequence_steps are device
//   arrays [capacity] indexed by batch position (the noise is sample's, keyed
//   by (params[p].seed, sequence_ids[p], sequence_steps[p])). For position p,
//   with T, K, P its temperature, top_k, top_p and x_i its logits as stored:
//   T <= 0 (or NaN): greedy. T > 0, no filter (K == 0 or K >= vocab, and P >=
//   1): Gumbel-max over the whole vocabulary, sample's token. Otherwise
//   filtered, in transformers' warper order (temperature, top-k, top-p).
//   Tokens are ordered by an order-preserving 16-bit key of the stored logit
//   (NaN as -inf, -0 equal to +0): equal keys are equal logits, a "key
//   group". Top-k: theta_k = the K-th largest key counting multiplicity;
//   token i is kept iff key_i >= theta_k (ties at the boundary all kept, as
//   transformers' TopKLogitsWarper). Top-p, on the tokens top-k kept: q_i =
//   w_i / Z with w_i = exp((x_i - x_max) / T) (w = 1 for the largest key, so
//   rows of -inf and rows with +inf are defined) and Z the sum over kept
//   tokens; a key group is kept iff the mass of kept tokens with a larger
//   key is < P (transformers keeps a token iff the mass strictly above it is
//   < P; here tokens of equal logit are kept or dropped together). The top
//   group always survives. token = argmax over the survivors of (x_i / T +
//   g_i), sample's scores and noise, ties to the lowest index.
// Masses are summed as 64-bit fixed-point integers (weights rounded to
// 2^-40), exact and order-free, so a position's token depends only on its
// row and parameters: the same bits at any batch position, capacity, bucket
// or engine. The filtered path reads the row up to four times (L2 after the
// first); greedy and plain positions take the single pass.
//
// A cluster of select_blocks(vocab) blocks per position splits the row.
// Refused: a config ValidateDecoderConfig refuses, a null batch.active, and
// for sampling null sequence ids or steps (or per-position parameters null
// or misaligned).
#pragma once

#include <cstdint>

#include "kernels/select_params.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "kernels/select_body.cuh"
#endif

namespace baton::ops {

struct Select : GraphOnlyOp {  // (the device step selects in ops::SelectAndEnd)
  static constexpr const char* kName = "select";
  enum class Mode : std::uint32_t { kArgmax, kSample, kPerPosition };
  struct Args : RowsArgs<Select> {
    const void* logits = nullptr;
    detail::decode::SelectParams params;
    const std::uint64_t* sequence_ids = nullptr;
    const std::uint32_t* sequence_steps = nullptr;
    std::int32_t* tokens = nullptr;
    Mode mode = Mode::kArgmax;
  };

  static Args argmax(const DecoderConfig& c, const void* logits, DecodeBatch batch,
                     std::int32_t* tokens) {
    return {{c, batch}, logits, {}, nullptr, nullptr, tokens, Mode::kArgmax};
  }
  static Args sample(const DecoderConfig& c, const void* logits, DecodeBatch batch,
                     SamplingParams params, const std::uint64_t* sequence_ids,
                     const std::uint32_t* sequence_steps, std::int32_t* tokens) {
    if (!(params.temperature > 0.0f)) return argmax(c, logits, batch, tokens);
    return {{c, batch}, logits, params, sequence_ids, sequence_steps, tokens, Mode::kSample};
  }
  static Args sample_positions(const DecoderConfig& c, const void* logits, DecodeBatch batch,
                               const PositionSampling* params, const std::uint64_t* sequence_ids,
                               const std::uint32_t* sequence_steps, std::int32_t* tokens) {
    return {
        {c, batch},        logits,         detail::decode::SelectParams(SamplingParams{}, params),
        sequence_ids,      sequence_steps, tokens,
        Mode::kPerPosition};
  }

  static cudaError_t check(const Args& a) {
    bool ok = decode_shape_ok(a.config, a.batch);
    if (a.mode != Mode::kArgmax)
      ok = ok && a.sequence_ids != nullptr && a.sequence_steps != nullptr;
    if (a.mode == Mode::kPerPosition) {
      const auto* p = a.params.positions;
      ok = ok && p != nullptr &&
           reinterpret_cast<std::uintptr_t>(p) % alignof(PositionSampling) == 0;
    }
    return ok ? cudaSuccess : cudaErrorInvalidValue;
  }

  // A cluster of select_blocks(vocab) blocks per position (along x).
  BATON_HOST_DEVICE static LaunchShape shape(const DecoderConfig& c, std::uint32_t capacity,
                                             unsigned shared_bytes) {
    const unsigned cluster = static_cast<unsigned>(detail::decode::select_blocks(c.vocab));
    return {dim3(cluster, capacity), dim3(detail::decode::kSelectThreads), dim3(cluster),
            shared_bytes};
  }

#if defined(__CUDACC__)
  template <class T, bool Sample>
  struct Variant
      : ClusteredBlock<T, detail::decode::kSelectThreads, 0, detail::decode::kSelectMaxCluster> {
    static constexpr bool kSample = Sample;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    using detail::decode::SelectShared;
    return with_dtype(a.config.dtype, [&](auto t) {
      using T = decltype(t);
      return a.mode == Mode::kArgmax
                 ? f(Variant<T, false>{},
                     shape(a.config, a.batch.capacity, sizeof(SelectShared<false>)))
                 : f(Variant<T, true>{},
                     shape(a.config, a.batch.capacity, sizeof(SelectShared<true>)));
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    detail::decode::select_body<T, V::kSample>(
        a.config, static_cast<const T*>(a.logits), a.batch, a.params, a.sequence_ids,
        a.sequence_steps, a.tokens, tile,
        shared_as<detail::decode::SelectShared<V::kSample>>(shared));
  }
#endif
};

}  // namespace baton::ops
