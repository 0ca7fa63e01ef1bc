// The decoder model's step launched from the device (DeviceStepKind::kDecoder):
// the same kernel bodies as the graph path (decoder_step_body.cuh and the
// src/kernels .cuh bodies), in the order DecoderModel::EnqueueStep captures
// them with DecoderGemm::kBatonGemv, with grids sized for the actual batch.
//
// A device launch carries no launch attributes: no programmatic dependent
// launch (the bodies' griddepcontrol calls are no-ops, and tail launches run
// one after another anyway) and no cluster dimensions set at launch. The
// cluster kernels (GEMV split-K, token selection) therefore come with
// compile-time __cluster_dims__, one instantiation per cluster size (a
// function of the shape alone, 1 to 8): measured on an H200 (CUDA 13.0,
// driver 580), such a kernel launched with <<<>>> into cudaStreamTailLaunch
// runs as clusters (cluster.num_blocks() as compiled, distributed shared
// memory works), so every engine sums in the same order.
#include <cstdint>

#include "attention_body.cuh"
#include "decoder_device_step.h"
#include "decoder_step_body.cuh"
#include "dp_step_launch.cuh"
#include "gemv_body.cuh"
#include "row_kernel_body.cuh"
#include "select_body.cuh"

namespace baton::detail {
namespace {

using decode::attention_body;
using decode::gemv_body;
using decode::gemv_split;
using decode::GemvInput;
using decode::kAttentionThreads;
using decode::kMmaMaxSplit;
using decode::kMmaPositions;
using decode::kMmaRows;
using decode::kMmaWarps;
using decode::kRowThreads;
using decode::kSelectMaxCluster;
using decode::kSelectThreads;
using decode::kVector;
using decode::row_body;
using decode::RowArgs;
using decode::RowSource;
using decode::select_blocks;
using decode::select_body;

__global__ void dp_step_begin_kernel(DecoderStepView v, StepArgs args, std::uint32_t capacity) {
  step_begin_body(v, args, capacity);
}

__global__ void dp_step_end_kernel(DecoderStepView v, StepArgs args, std::uint32_t capacity) {
  step_end_body(v, args, capacity);
}

template <class T, RowSource Source, bool Norm>
__global__ void __launch_bounds__(kRowThreads)
    dp_row_kernel(DecoderConfig config, RowArgs a, DecodeBatch batch) {
  row_body<T, Source, Norm>(config, a, batch);
}

template <class T, int V>
__global__ void __launch_bounds__(kAttentionThreads)
    dp_rope_attention_kernel(DecoderConfig config, T* qkv, KvCacheLayer cache, DecodeBatch batch,
                             T* out) {
  attention_body<T, V, true>(config, qkv, cache, batch, out);
}

template <class T, GemvInput Input, int Split>
__global__ void __cluster_dims__(1, 1, Split) __launch_bounds__(kMmaWarps * 32)
    dp_gemv_cluster_kernel(const T* w, int out_features, int in_features, const T* x,
                           DecodeBatch batch, T* y) {
  gemv_body<T, Input>(w, out_features, in_features, x, batch, y);
}

template <class T, bool Sample, int Blocks>
__global__ void __cluster_dims__(Blocks, 1, 1) __launch_bounds__(kSelectThreads)
    dp_select_cluster_kernel(DecoderConfig config, const T* logits, DecodeBatch batch,
                             SamplingParams params, const std::uint64_t* sequence_ids,
                             const std::uint32_t* sequence_steps, std::int32_t* tokens) {
  select_body<T, Sample>(config, logits, batch, params, sequence_ids, sequence_steps, tokens);
}

// Launches one step's kernels into cudaStreamTailLaunch, in order; after the
// first launch CUDA refuses, launches nothing more.
template <class T>
class DecoderStepLauncher {
 public:
  __device__ DecoderStepLauncher(const DecoderDeviceStep& step, const StepArgs& args,
                                 std::uint32_t batch)
      : s_(step),
        args_(args),
        batch_(batch),
        // Settled: launches into the tail stream run one after another, so
        // everything a kernel reads was written by finished grids.
        db_{&args.header->batch, batch, args.slots, step.view.positions, step.view.max_batch,
            /*settled=*/true} {}

  __device__ DeviceStepLaunch run() {
    const DecoderConfig& c = s_.view.config;
    const unsigned frame_blocks = (batch_ + kStepFrameThreads - 1) / kStepFrameThreads;
    dp_step_begin_kernel<<<frame_blocks, kStepFrameThreads, 0, cudaStreamTailLaunch>>>(
        s_.view, args_, batch_);
    if (!launched()) return launch_;
    row<RowSource::kEmbedding>(s_.embedding, s_.view.in_tokens, s_.layers[0].attn_norm);
    for (int l = 0; l < c.layers && ok(); ++l) {
      const DecoderLayerView layer = s_.layers[l];
      gemv<GemvInput::kPlain>(layer.wqkv, c.qkv_width(), c.d_model, s_.normed, s_.qkv);
      rope_attention(layer.cache);
      gemv<GemvInput::kPlain>(layer.wo, c.d_model, c.attention_width(), s_.attention, s_.projected);
      row<RowSource::kResidual>(s_.projected, nullptr, layer.ffn_norm);
      gemv<GemvInput::kPlain>(layer.w_gate_up, c.gate_up_width(), c.d_model, s_.normed, s_.gate_up);
      gemv<GemvInput::kGated>(layer.w_down, c.d_model, c.ffn, s_.gate_up, s_.projected);
      row<RowSource::kResidual>(s_.projected, nullptr,
                                l + 1 < c.layers ? s_.layers[l + 1].attn_norm : s_.final_norm);
    }
    gemv<GemvInput::kPlain>(s_.lm_head, c.vocab, c.d_model, s_.normed, s_.logits);
    if (s_.sampling.temperature > 0.0f) {
      select<true>();
    } else {
      select<false>();
    }
    if (!ok()) return launch_;
    dp_step_end_kernel<<<frame_blocks, kStepFrameThreads, 0, cudaStreamTailLaunch>>>(s_.view, args_,
                                                                                     batch_);
    launched();
    return launch_;
  }

 private:
  [[nodiscard]] __device__ bool ok() const { return launch_.error == cudaSuccess; }

  // Records the launch just made; false when CUDA refused it.
  __device__ bool launched() {
    launch_.error = cudaGetLastError();
    if (launch_.error != cudaSuccess) return false;
    ++launch_.launches;
    return true;
  }

  // An embedding or residual add fused with the RMSNorm that follows it.
  template <RowSource Source>
  __device__ void row(const void* source, const std::int32_t* tokens, const void* norm) {
    if (!ok()) return;
    RowArgs a;
    a.source = source;
    a.tokens = tokens;
    a.hidden = s_.hidden;
    a.weight = norm;
    a.out = s_.normed;
    dp_row_kernel<T, Source, true>
        <<<batch_, kRowThreads, 0, cudaStreamTailLaunch>>>(s_.view.config, a, db_);
    launched();
  }

  __device__ void rope_attention(const KvCacheLayer& cache) {
    if (!ok()) return;
    const DecoderConfig& c = s_.view.config;
    const dim3 grid(batch_, c.heads);
    const unsigned shared_bytes = sizeof(float) * c.max_context;
    T* qkv = static_cast<T*>(s_.qkv);
    T* out = static_cast<T*>(s_.attention);
    if (c.head_dim % kVector == 0) {
      dp_rope_attention_kernel<T, kVector>
          <<<grid, kAttentionThreads, shared_bytes, cudaStreamTailLaunch>>>(c, qkv, cache, db_,
                                                                            out);
    } else {
      dp_rope_attention_kernel<T, 2>
          <<<grid, kAttentionThreads, shared_bytes, cudaStreamTailLaunch>>>(c, qkv, cache, db_,
                                                                            out);
    }
    launched();
  }

  // y = W · x with the graph path's grid: K split across a cluster of
  // gemv_split blocks.
  template <GemvInput Input>
  __device__ void gemv(const void* w, int out_features, int in_features, const void* x, void* y) {
    if (!ok()) return;
    const int split = gemv_split(out_features, in_features);
    const dim3 grid((out_features + kMmaRows - 1) / kMmaRows,
                    (batch_ + kMmaPositions - 1) / kMmaPositions, split);
    gemv_cluster<Input, 1>(split, grid, static_cast<const T*>(w), out_features, in_features,
                           static_cast<const T*>(x), static_cast<T*>(y));
    launched();
  }

  // The instantiation whose compile-time cluster is `split` blocks.
  template <GemvInput Input, int Split>
  __device__ void gemv_cluster(int split, dim3 grid, const T* w, int out_features, int in_features,
                               const T* x, T* y) {
    if (split == Split) {
      dp_gemv_cluster_kernel<T, Input, Split><<<grid, kMmaWarps * 32, 0, cudaStreamTailLaunch>>>(
          w, out_features, in_features, x, db_, y);
    } else if constexpr (Split < kMmaMaxSplit) {
      gemv_cluster<Input, Split + 1>(split, grid, w, out_features, in_features, x, y);
    }
  }

  // Argmax (Sample = false) or Gumbel-max sampling of the logits, a cluster
  // of select_blocks blocks per position.
  template <bool Sample>
  __device__ void select() {
    if (!ok()) return;
    const int blocks = select_blocks(s_.view.config.vocab);
    select_cluster<Sample, 1>(blocks, dim3(blocks, batch_), static_cast<const T*>(s_.logits));
    launched();
  }

  template <bool Sample, int Blocks>
  __device__ void select_cluster(int blocks, dim3 grid, const T* logits) {
    if (blocks == Blocks) {
      dp_select_cluster_kernel<T, Sample, Blocks>
          <<<grid, kSelectThreads, 0, cudaStreamTailLaunch>>>(
              s_.view.config, logits, db_, s_.sampling, s_.view.sequence_ids,
              s_.view.sequence_steps, s_.view.out_tokens);
    } else if constexpr (Blocks < kSelectMaxCluster) {
      select_cluster<Sample, Blocks + 1>(blocks, grid, logits);
    }
  }

  const DecoderDeviceStep& s_;
  const StepArgs& args_;
  const std::uint32_t batch_;
  const DecodeBatch db_;
  DeviceStepLaunch launch_;
};

}  // namespace

__device__ DeviceStepLaunch launch_decoder_step(const StepArgs& args, const void* params,
                                                std::uint32_t batch) {
  // An empty step has nothing to run (and a grid of 0 blocks is refused).
  if (batch == 0) return DeviceStepLaunch{};
  const DecoderDeviceStep& step = *static_cast<const DecoderDeviceStep*>(params);
  if (step.view.config.dtype == DecoderDType::kBFloat16) {
    return DecoderStepLauncher<__nv_bfloat16>(step, args, batch).run();
  }
  return DecoderStepLauncher<__half>(step, args, batch).run();
}

}  // namespace baton::detail
