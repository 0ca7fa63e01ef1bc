// The decoder model's step launched from the device (its DeviceStepProgram):
// the same kernel bodies as the graph path (decoder_step_body.cuh and the
// src/kernels .cuh bodies), in the order DecoderModel::EnqueueStep captures
// them for a GEMV bucket (RMSNorm and residual adds fused into the GEMVs),
// with grids sized for the actual batch.
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

#include "decoder_device_step.h"
#include "decoder_step_body.cuh"
#include "engines/dp_scheduler.cuh"
#include "kernels/attention_body.cuh"
#include "kernels/gemv_body.cuh"
#include "kernels/row_kernel_body.cuh"
#include "kernels/select_body.cuh"

namespace baton::detail {
namespace {

using decode::attention_body;
using decode::gemv_body;
using decode::gemv_fuses_norm;
using decode::gemv_split;
using decode::GemvInput;
using decode::GemvIo;
using decode::GemvOutput;
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

template <class T, RowSource Source>
__global__ void __launch_bounds__(kRowThreads)
    dp_row_norm_kernel(DecoderConfig config, RowArgs a, DecodeBatch batch) {
  row_body<T, Source, true>(config, a, batch);
}

template <class T, int V>
__global__ void __launch_bounds__(kAttentionThreads)
    dp_rope_attention_kernel(DecoderConfig config, T* qkv, KvCacheLayer cache, DecodeBatch batch,
                             T* out) {
  attention_body<T, V, true>(config, qkv, cache, batch, out);
}

template <class T, GemvInput Input, GemvOutput Output, int Split>
__global__ void __cluster_dims__(1, 1, Split) __launch_bounds__(kMmaWarps * 32)
    dp_gemv_cluster_kernel(const T* w, int out_features, int in_features, GemvIo io,
                           DecodeBatch batch) {
  gemv_body<T, Input, Output>(w, out_features, in_features, io, batch);
}

// Token selection with the step's end (StepEndHooks), as on the graph path.
template <class T, bool Sample, int Blocks>
__global__ void __cluster_dims__(Blocks, 1, 1) __launch_bounds__(kSelectThreads)
    dp_select_and_end_kernel(DecoderStepView v, StepArgs args, const T* logits, DecodeBatch batch,
                             SamplingParams sampling) {
  select_body<T, Sample>(v.config, logits, batch, sampling, v.sequence_ids, v.sequence_steps,
                         v.out_tokens, StepEndHooks{v, args});
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
    for (int l = 0; l < c.layers && ok(); ++l) {
      const DecoderLayerView layer = s_.layers[l];
      if (l == 0 && gemv_fuses_norm(c.qkv_width(), c.d_model)) {
        gemv<GemvInput::kEmbeddingRmsNorm, GemvOutput::kStore>(
            layer.wqkv, c.qkv_width(), c.d_model,
            GemvIo::embedding_rms_norm(c, s_.embedding, s_.view.in_tokens, s_.hidden,
                                       layer.attn_norm, s_.qkv));
      } else if (l == 0) {
        row_norm<RowSource::kEmbedding>(s_.embedding, s_.view.in_tokens, layer.attn_norm);
        gemv<GemvInput::kPlain, GemvOutput::kStore>(layer.wqkv, c.qkv_width(), c.d_model,
                                                    GemvIo::plain(s_.normed, s_.qkv));
      } else {
        normed_gemv(layer.wqkv, c.qkv_width(), layer.attn_norm, s_.qkv);
      }
      rope_attention(layer.cache);
      gemv<GemvInput::kPlain, GemvOutput::kResidualAdd>(
          layer.wo, c.d_model, c.attention_width(), GemvIo::residual_add(s_.attention, s_.hidden));
      normed_gemv(layer.w_gate_up, c.gate_up_width(), layer.ffn_norm, s_.gate_up);
      gemv<GemvInput::kGated, GemvOutput::kResidualAdd>(
          layer.w_down, c.d_model, c.ffn, GemvIo::residual_add(s_.gate_up, s_.hidden));
    }
    normed_gemv(s_.lm_head, c.vocab, s_.final_norm, s_.logits);
    if (s_.sampling.temperature > 0.0f) {
      select_and_end<true>();
    } else {
      select_and_end<false>();
    }
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

  // y = W · RMSNorm(hidden) * norm, fused where gemv_fuses_norm says so (as
  // DecoderModel::NormedGemv decides on the graph path).
  __device__ void normed_gemv(const void* w, int out_features, const void* norm, void* y) {
    const int d_model = s_.view.config.d_model;
    if (gemv_fuses_norm(out_features, d_model)) {
      gemv<GemvInput::kRmsNorm, GemvOutput::kStore>(
          w, out_features, d_model, GemvIo::rms_norm(s_.view.config, s_.hidden, norm, y));
    } else {
      row_norm<RowSource::kHidden>(nullptr, nullptr, norm);
      gemv<GemvInput::kPlain, GemvOutput::kStore>(w, out_features, d_model,
                                                  GemvIo::plain(s_.normed, y));
    }
  }

  // normed = RMSNorm(hidden or the embedding rows, which it stores as hidden).
  template <RowSource Source>
  __device__ void row_norm(const void* source, const std::int32_t* tokens, const void* norm) {
    if (!ok()) return;
    RowArgs a;
    a.source = source;
    a.tokens = tokens;
    a.hidden = s_.hidden;
    a.weight = norm;
    a.out = s_.normed;
    dp_row_norm_kernel<T, Source>
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

  // A GEMV with the graph path's grid: K split across a cluster of
  // gemv_split blocks.
  template <GemvInput Input, GemvOutput Output>
  __device__ void gemv(const void* w, int out_features, int in_features, const GemvIo& io) {
    if (!ok()) return;
    const int split = gemv_split(out_features, in_features);
    const dim3 grid((out_features + kMmaRows - 1) / kMmaRows,
                    (batch_ + kMmaPositions - 1) / kMmaPositions, split);
    gemv_cluster<Input, Output, 1>(split, grid, static_cast<const T*>(w), out_features, in_features,
                                   io);
    launched();
  }

  // The instantiation whose compile-time cluster is `split` blocks.
  template <GemvInput Input, GemvOutput Output, int Split>
  __device__ void gemv_cluster(int split, dim3 grid, const T* w, int out_features, int in_features,
                               const GemvIo& io) {
    if (split == Split) {
      dp_gemv_cluster_kernel<T, Input, Output, Split>
          <<<grid, kMmaWarps * 32, 0, cudaStreamTailLaunch>>>(w, out_features, in_features, io,
                                                              db_);
    } else if constexpr (Split < kMmaMaxSplit) {
      gemv_cluster<Input, Output, Split + 1>(split, grid, w, out_features, in_features, io);
    }
  }

  // Argmax (Sample = false) or Gumbel-max sampling of the logits, a cluster
  // of select_blocks blocks per position, ending the step.
  template <bool Sample>
  __device__ void select_and_end() {
    if (!ok()) return;
    const int blocks = select_blocks(s_.view.config.vocab);
    select_cluster<Sample, 1>(blocks, dim3(blocks, batch_), static_cast<const T*>(s_.logits));
    launched();
  }

  template <bool Sample, int Blocks>
  __device__ void select_cluster(int blocks, dim3 grid, const T* logits) {
    if (blocks == Blocks) {
      dp_select_and_end_kernel<T, Sample, Blocks>
          <<<grid, kSelectThreads, 0, cudaStreamTailLaunch>>>(s_.view, args_, logits, db_,
                                                              s_.sampling);
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

// The step Baton's dynamic-parallelism scheduler launches (engines/dp_scheduler.cuh).
struct DecoderDeviceStepKernels {
  static __device__ DeviceStepLaunch launch(const StepArgs& args, const void* params,
                                            std::uint32_t batch) {
    const DecoderDeviceStep& step = *static_cast<const DecoderDeviceStep*>(params);
    if (step.view.config.dtype == DecoderDType::kBFloat16) {
      return DecoderStepLauncher<__nv_bfloat16>(step, args, batch).run();
    }
    return DecoderStepLauncher<__half>(step, args, batch).run();
  }
};

cudaError_t LaunchDecoderDynamicParallelism(const void* scheduler, const void* params,
                                            cudaStream_t stream) {
  return DynamicParallelismLaunch<DecoderDeviceStepKernels>(scheduler, params, stream);
}

}  // namespace baton::detail
