// Latency is what the decode step's kernels pay for (one small row per
// position, a handful of positions): every thread issues all of its 16-byte
// loads before it uses any, rows that are long get more blocks, and every
// kernel is launched with programmatic dependent launch (baton/step_kernel.cuh)
// so it starts while its predecessor finishes. Each kernel loads only
// constant data (weights) before wait_for_previous_nodes() and lets the next
// node launch right after it, once all of its blocks are resident.
//
// The bodies of the kernels the decoder model's step runs live in .cuh
// headers (row_kernel_body.cuh, attention_body.cuh, gemv_body.cuh,
// select_body.cuh): the dynamic-parallelism engine compiles the same bodies
// into its own device link (src/model/dp_decoder_step.cu).
#include <cstdint>
#include <type_traits>
#include <utility>

#include "baton/step_kernel.cuh"
#include "kernels/attention_body.cuh"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/decode_kernels.h"
#include "kernels/gemv_body.cuh"
#include "kernels/row_kernel_body.cuh"
#include "kernels/select_body.cuh"

namespace baton {
namespace {

using detail::decode::attention_body;
using detail::decode::attention_launch_shape;
using detail::decode::AttentionLaunchShape;
using detail::decode::dispatch_attention;
using detail::decode::enter_step_node_active;
using detail::decode::enter_step_node_sequence;
using detail::decode::gemv_body;
using detail::decode::gemv_split;
using detail::decode::GemvInput;
using detail::decode::GemvIo;
using detail::decode::GemvOutput;
using detail::decode::kAttentionMinBlocks;
using detail::decode::kAttentionThreads;
using detail::decode::kMmaPositions;
using detail::decode::kMmaRows;
using detail::decode::kMmaWarps;
using detail::decode::kRowThreads;
using detail::decode::kSelectThreads;
using detail::decode::kVector;
using detail::decode::load_packed;
using detail::decode::RopeAngles;
using detail::decode::row_body;
using detail::decode::RowArgs;
using detail::decode::RowSource;
using detail::decode::select_blocks;
using detail::decode::select_body;
using detail::decode::SelectParams;
using detail::decode::silu_mul_body;
using detail::decode::store_packed;

template <class T, RowSource Source, bool Norm>
__global__ void __launch_bounds__(kRowThreads)
    row_kernel(DecoderConfig config, RowArgs a, DecodeBatch batch) {
  row_body<T, Source, Norm>(config, a, batch);
}

template <class T, int V>
__global__ void __launch_bounds__(detail::decode::kRopeAppendThreads)
    rope_append_kv_kernel(DecoderConfig config, const float* inv_freq, T* qkv, KvCacheLayer cache,
                          DecodeBatch batch) {
  detail::decode::rope_append_body<T, V>(config, inv_freq, qkv, cache, batch);
}

template <class T, int V, int H, bool Rope, bool Split>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionMinBlocks)
    attention_kernel(DecoderConfig config, const float* inv_freq, T* qkv, KvCacheLayer cache,
                     DecodeBatch batch, AttentionScratch scratch, AttentionShortRows short_rows,
                     T* out) {
  __shared__ detail::decode::AttentionShared<T, V, H, Split> shared;
  extern __shared__ __align__(16) float scores[];  // attention_launch_shape's shared_bytes
  attention_body<T, V, H, Rope, Split>(config, inv_freq, qkv, cache, batch, scratch, short_rows,
                                       shared, scores, out);
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    silu_mul_kernel(DecoderConfig config, const T* gate_up, DecodeBatch batch, T* out) {
  silu_mul_body<T>(config, gate_up, batch, out);
}

// The cluster is set at launch (launch_clustered_step_kernel).
template <class T, bool Sample>
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(DecoderConfig config, const T* logits, DecodeBatch batch, SelectParams params,
                  const std::uint64_t* sequence_ids, const std::uint32_t* sequence_steps,
                  std::int32_t* tokens) {
  select_body<T, Sample>(config, logits, batch, params, sequence_ids, sequence_steps, tokens);
}

template <class T, GemvInput Input, GemvOutput Output>
__global__ void __launch_bounds__(kMmaWarps * 32)
    gemv_kernel(const T* w, int out_features, int in_features, GemvIo io, DecodeBatch batch) {
  gemv_body<T, Input, Output>(w, out_features, in_features, io, batch);
}

// Calls body(T{}) with the storage type of `dtype`; body returns the launch's
// cudaError_t.
template <class Body>
cudaError_t dispatch(DecoderDType dtype, Body&& body) {
  switch (dtype) {
    case DecoderDType::kFloat16:
      return body(__half{});
    case DecoderDType::kBFloat16:
      return body(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// The shapes ValidateDecoderConfig accepts (16-byte rows included).
bool shape_ok(const DecoderConfig& config, const DecodeBatch& batch) {
  return config.d_model > 0 && config.heads > 0 && config.kv_heads >= 0 &&
         config.heads % config.key_value_heads() == 0 && config.head_dim > 0 &&
         config.head_dim % 2 == 0 && config.head_dim <= kDecoderMaxHeadDim && config.ffn > 0 &&
         config.vocab > 0 && config.max_context > 0 && config.max_context <= kDecoderMaxContext &&
         config.d_model % kVector == 0 && config.ffn % kVector == 0 &&
         config.padded_vocab() % kVector == 0 && config.attention_width() % kVector == 0 &&
         batch.active != nullptr;
}

bool aligned(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

template <RowSource Source, bool Norm>
cudaError_t launch_row(const DecoderConfig& config, const RowArgs& args, DecodeBatch batch,
                       cudaStream_t stream) {
  if (!shape_ok(config, batch) || !aligned(args.source) || !aligned(args.hidden) ||
      !aligned(args.weight) || !aligned(args.out)) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    return launch_step_kernel(row_kernel<decltype(tag), Source, Norm>, dim3(batch.capacity),
                              dim3(kRowThreads), 0, stream, config, args, batch);
  });
}

// The attention kernel's instantiation for the config (load width V, query
// heads per pass H): the single-pass kernel, or the split one on its grid
// (kernels/attention_split.h).
template <class T, bool Rope>
struct AttentionLaunch {
  const DecoderConfig& config;
  const float* inv_freq;
  T* qkv;
  KvCacheLayer cache;
  DecodeBatch batch;
  AttentionScratch scratch;
  AttentionShortRows short_rows;
  T* out;
  cudaStream_t stream;
  template <int V, int H>
  cudaError_t operator()() const {
    const AttentionLaunchShape shape = attention_launch_shape(config, batch.capacity, short_rows);
    // (The single-pass kernel has no use for H: one instantiation.)
    const auto kernel = shape.split ? attention_kernel<T, V, H, Rope, true>
                                    : attention_kernel<T, V, 4, Rope, false>;
    if (shape.shared_bytes > 0) {
      const cudaError_t opted_in =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shape.shared_bytes));
      if (opted_in != cudaSuccess) return opted_in;
    }
    return launch_step_kernel(kernel, shape.grid, dim3(kAttentionThreads), shape.shared_bytes,
                              stream, config, inv_freq, qkv, cache, batch, scratch, short_rows,
                              out);
  }
};

template <bool Rope>
cudaError_t launch_attention(const DecoderConfig& config, const float* inv_freq, void* qkv,
                             KvCacheLayer cache, DecodeBatch batch, AttentionScratch scratch,
                             void* out, cudaStream_t stream, AttentionShortRows short_rows) {
  if (!shape_ok(config, batch) || batch.slots == nullptr || batch.positions == nullptr ||
      (Rope && inv_freq == nullptr) || !attention_scratch_ok(config, batch.capacity, scratch) ||
      (short_rows != AttentionShortRows::kPerQueryHead &&
       short_rows != AttentionShortRows::kGrouped)) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return dispatch_attention(
        config, AttentionLaunch<T, Rope>{config, inv_freq, static_cast<T*>(qkv), cache, batch,
                                         scratch, short_rows, static_cast<T*>(out), stream});
  });
}

template <bool Sample>
cudaError_t launch_select(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          SelectParams params, const std::uint64_t* sequence_ids,
                          const std::uint32_t* sequence_steps, std::int32_t* tokens,
                          cudaStream_t stream) {
  const unsigned cluster = static_cast<unsigned>(select_blocks(config.vocab));
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_clustered_step_kernel(select_kernel<T, Sample>, dim3(cluster, batch.capacity),
                                        dim3(kSelectThreads), dim3(cluster), stream, config,
                                        static_cast<const T*>(logits), batch, params, sequence_ids,
                                        sequence_steps, tokens);
  });
}

template <GemvInput Input, GemvOutput Output>
cudaError_t launch_gemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                        const GemvIo& io, DecodeBatch batch, cudaStream_t stream) {
  bool input_ok = aligned(io.x);
  if (Input == GemvInput::kRmsNorm) {
    input_ok = io.hidden != nullptr && aligned(io.hidden);
  } else if (Input == GemvInput::kEmbeddingRmsNorm) {
    input_ok = io.embedding != nullptr && aligned(io.embedding) && io.tokens != nullptr &&
               io.embedded != nullptr && aligned(io.embedded) && io.vocab > 0;
  }
  if (detail::decode::normed_input(Input)) {
    input_ok = input_ok && io.norm_weight != nullptr && aligned(io.norm_weight);
  }
  if (out_features < 1 || in_features < 1 || in_features % kVector != 0 || !aligned(w) ||
      !input_ok || !detail::decode::gemv_output_ok(Output, io, out_features) ||
      batch.active == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  // K split across a cluster: a function of the shape alone (gemv_split).
  const int row_blocks = (out_features + kMmaRows - 1) / kMmaRows;
  const int split = gemv_split(out_features, in_features);
  const dim3 grid(row_blocks, (batch.capacity + kMmaPositions - 1) / kMmaPositions, split);
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_clustered_step_kernel(gemv_kernel<T, Input, Output>, grid, dim3(kMmaWarps * 32),
                                        dim3(1, 1, split), stream, static_cast<const T*>(w),
                                        out_features, in_features, io, batch);
  });
}

}  // namespace

cudaError_t EnqueueEmbedding(const DecoderConfig& config, const void* embedding,
                             const std::int32_t* tokens, DecodeBatch batch, float* hidden,
                             cudaStream_t stream) {
  if (tokens == nullptr) return cudaErrorInvalidValue;
  RowArgs args;
  args.source = embedding;
  args.tokens = tokens;
  args.hidden = hidden;
  return launch_row<RowSource::kEmbedding, false>(config, args, batch, stream);
}

cudaError_t EnqueueRmsNorm(const DecoderConfig& config, const float* hidden, const void* weight,
                           DecodeBatch batch, void* out, cudaStream_t stream) {
  RowArgs args;
  args.hidden = const_cast<float*>(hidden);  // read only: RowSource::kHidden
  args.weight = weight;
  args.out = out;
  return launch_row<RowSource::kHidden, true>(config, args, batch, stream);
}

cudaError_t EnqueueResidualAdd(const DecoderConfig& config, float* hidden, const void* delta,
                               DecodeBatch batch, cudaStream_t stream) {
  RowArgs args;
  args.source = delta;
  args.hidden = hidden;
  return launch_row<RowSource::kResidual, false>(config, args, batch, stream);
}

cudaError_t EnqueueEmbeddingRmsNorm(const DecoderConfig& config, const void* embedding,
                                    const std::int32_t* tokens, const void* weight,
                                    DecodeBatch batch, float* hidden, void* out,
                                    cudaStream_t stream) {
  if (tokens == nullptr) return cudaErrorInvalidValue;
  RowArgs args;
  args.source = embedding;
  args.tokens = tokens;
  args.hidden = hidden;
  args.weight = weight;
  args.out = out;
  return launch_row<RowSource::kEmbedding, true>(config, args, batch, stream);
}

cudaError_t EnqueueResidualAddRmsNorm(const DecoderConfig& config, float* hidden, const void* delta,
                                      const void* weight, DecodeBatch batch, void* out,
                                      cudaStream_t stream) {
  RowArgs args;
  args.source = delta;
  args.hidden = hidden;
  args.weight = weight;
  args.out = out;
  return launch_row<RowSource::kResidual, true>(config, args, batch, stream);
}

cudaError_t EnqueueRopeAppendKv(const DecoderConfig& config, const float* inv_freq, void* qkv,
                                KvCacheLayer cache, DecodeBatch batch, cudaStream_t stream) {
  if (!shape_ok(config, batch) || batch.slots == nullptr || batch.positions == nullptr ||
      inv_freq == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  const bool wide = config.head_dim % kVector == 0;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return wide ? launch_step_kernel(rope_append_kv_kernel<T, kVector>, dim3(batch.capacity),
                                     dim3(detail::decode::kRopeAppendThreads), 0, stream, config,
                                     inv_freq, static_cast<T*>(qkv), cache, batch)
                : launch_step_kernel(rope_append_kv_kernel<T, 2>, dim3(batch.capacity),
                                     dim3(detail::decode::kRopeAppendThreads), 0, stream, config,
                                     inv_freq, static_cast<T*>(qkv), cache, batch);
  });
}

cudaError_t EnqueueDecodeAttention(const DecoderConfig& config, const void* qkv, KvCacheLayer cache,
                                   DecodeBatch batch, AttentionScratch scratch, void* out,
                                   cudaStream_t stream, AttentionShortRows short_rows) {
  // Read only without RoPE.
  return launch_attention<false>(config, nullptr, const_cast<void*>(qkv), cache, batch, scratch,
                                 out, stream, short_rows);
}

cudaError_t EnqueueRopeAttention(const DecoderConfig& config, const float* inv_freq, void* qkv,
                                 KvCacheLayer cache, DecodeBatch batch, AttentionScratch scratch,
                                 void* out, cudaStream_t stream, AttentionShortRows short_rows) {
  return launch_attention<true>(config, inv_freq, qkv, cache, batch, scratch, out, stream,
                                short_rows);
}

cudaError_t EnqueueSiluMul(const DecoderConfig& config, const void* gate_up, DecodeBatch batch,
                           void* out, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  const int vectors = config.ffn / kVector;
  const dim3 grid((vectors + kRowThreads - 1) / kRowThreads, batch.capacity);
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_step_kernel(silu_mul_kernel<T>, grid, dim3(kRowThreads), 0, stream, config,
                              static_cast<const T*>(gate_up), batch, static_cast<T*>(out));
  });
}

cudaError_t EnqueueArgmax(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          std::int32_t* tokens, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return launch_select<false>(config, logits, batch, SamplingParams{}, nullptr, nullptr, tokens,
                              stream);
}

cudaError_t EnqueueSample(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          SamplingParams params, const std::uint64_t* sequence_ids,
                          const std::uint32_t* sequence_steps, std::int32_t* tokens,
                          cudaStream_t stream) {
  if (!(params.temperature > 0.0f)) {
    return EnqueueArgmax(config, logits, batch, tokens, stream);
  }
  if (!shape_ok(config, batch) || sequence_ids == nullptr || sequence_steps == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return launch_select<true>(config, logits, batch, params, sequence_ids, sequence_steps, tokens,
                             stream);
}

cudaError_t EnqueueGemvFused(DecoderDType dtype, detail::decode::GemvInput input,
                             detail::decode::GemvOutput output, const void* w, int out_features,
                             int in_features, const detail::decode::GemvIo& io, DecodeBatch batch,
                             cudaStream_t stream) {
  // The instantiation of <In, Out>; the pairs no step runs are refused.
  const auto with = [&](auto in, auto out) {
    return launch_gemv<decltype(in)::value, decltype(out)::value>(dtype, w, out_features,
                                                                  in_features, io, batch, stream);
  };
  using Plain = std::integral_constant<GemvInput, GemvInput::kPlain>;
  using Gated = std::integral_constant<GemvInput, GemvInput::kGated>;
  using Normed = std::integral_constant<GemvInput, GemvInput::kRmsNorm>;
  using Embedded = std::integral_constant<GemvInput, GemvInput::kEmbeddingRmsNorm>;
  using Store = std::integral_constant<GemvOutput, GemvOutput::kStore>;
  using Add = std::integral_constant<GemvOutput, GemvOutput::kResidualAdd>;
  using Silu = std::integral_constant<GemvOutput, GemvOutput::kSiluMul>;
  const bool store = output == GemvOutput::kStore;
  const bool add = output == GemvOutput::kResidualAdd;
  const bool silu = output == GemvOutput::kSiluMul;
  switch (input) {
    case GemvInput::kPlain:
      return store  ? with(Plain{}, Store{})
             : add  ? with(Plain{}, Add{})
             : silu ? with(Plain{}, Silu{})
                    : cudaErrorInvalidValue;
    case GemvInput::kGated:
      return store ? with(Gated{}, Store{}) : add ? with(Gated{}, Add{}) : cudaErrorInvalidValue;
    case GemvInput::kRmsNorm:  // no step adds a normed projection
      return store  ? with(Normed{}, Store{})
             : silu ? with(Normed{}, Silu{})
                    : cudaErrorInvalidValue;
    case GemvInput::kEmbeddingRmsNorm:
      return store ? with(Embedded{}, Store{}) : cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t EnqueueSamplePositions(const DecoderConfig& config, const void* logits,
                                   DecodeBatch batch, const PositionSampling* params,
                                   const std::uint64_t* sequence_ids,
                                   const std::uint32_t* sequence_steps, std::int32_t* tokens,
                                   cudaStream_t stream) {
  if (!shape_ok(config, batch) || params == nullptr || sequence_ids == nullptr ||
      sequence_steps == nullptr ||
      reinterpret_cast<std::uintptr_t>(params) % alignof(PositionSampling) != 0) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return launch_select<true>(config, logits, batch, SelectParams(SamplingParams{}, params),
                             sequence_ids, sequence_steps, tokens, stream);
}

cudaError_t EnqueueGemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                        const void* x, DecodeBatch batch, void* y, cudaStream_t stream) {
  return launch_gemv<GemvInput::kPlain, GemvOutput::kStore>(dtype, w, out_features, in_features,
                                                            GemvIo::plain(x, y), batch, stream);
}

cudaError_t EnqueueGatedGemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                             const void* gate_up, DecodeBatch batch, void* y, cudaStream_t stream) {
  return launch_gemv<GemvInput::kGated, GemvOutput::kStore>(
      dtype, w, out_features, in_features, GemvIo::plain(gate_up, y), batch, stream);
}

bool GemvFusesRmsNorm(int out_features, int in_features) {
  return detail::decode::gemv_fuses_norm(out_features, in_features);
}

cudaError_t EnqueueRmsNormGemv(const DecoderConfig& config, const void* w, int out_features,
                               const float* hidden, const void* norm_weight, DecodeBatch batch,
                               void* y, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  return launch_gemv<GemvInput::kRmsNorm, GemvOutput::kStore>(
      config.dtype, w, out_features, config.d_model,
      GemvIo::rms_norm(config, hidden, norm_weight, y), batch, stream);
}

cudaError_t EnqueueEmbeddingRmsNormGemv(const DecoderConfig& config, const void* embedding,
                                        const std::int32_t* tokens, const void* w, int out_features,
                                        const void* norm_weight, DecodeBatch batch, float* hidden,
                                        void* y, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  return launch_gemv<GemvInput::kEmbeddingRmsNorm, GemvOutput::kStore>(
      config.dtype, w, out_features, config.d_model,
      GemvIo::embedding_rms_norm(config, embedding, tokens, hidden, norm_weight, y), batch, stream);
}

cudaError_t EnqueueGemvResidualAdd(const DecoderConfig& config, const void* w, int in_features,
                                   const void* x, DecodeBatch batch, float* hidden,
                                   cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  return launch_gemv<GemvInput::kPlain, GemvOutput::kResidualAdd>(
      config.dtype, w, config.d_model, in_features, GemvIo::residual_add(x, hidden), batch, stream);
}

cudaError_t EnqueueGatedGemvResidualAdd(const DecoderConfig& config, const void* w, int in_features,
                                        const void* gate_up, DecodeBatch batch, float* hidden,
                                        cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  return launch_gemv<GemvInput::kGated, GemvOutput::kResidualAdd>(
      config.dtype, w, config.d_model, in_features, GemvIo::residual_add(gate_up, hidden), batch,
      stream);
}

}  // namespace baton
