// The decoder model's step launched from the device (its DeviceStepProgram):
// the same kernel bodies as the graph path (decoder_step_body.cuh and the
// src/kernels .cuh bodies), walking the same GEMV plan the graph path
// captures for a GEMV bucket (step_plan.h), with grids sized for the actual
// batch.
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
using decode::silu_mul_body;

__global__ void dp_step_begin_kernel(DecoderStepView v, StepArgs args, std::uint32_t capacity) {
  step_begin_body(v, args, capacity);
}

template <class T, RowSource Source>
__global__ void __launch_bounds__(kRowThreads)
    dp_row_norm_kernel(DecoderConfig config, RowArgs a, DecodeBatch batch) {
  row_body<T, Source, true>(config, a, batch);
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    dp_silu_mul_kernel(DecoderConfig config, const T* gate_up, DecodeBatch batch, T* out) {
  silu_mul_body<T>(config, gate_up, batch, out);
}

template <class T, int V>
__global__ void __launch_bounds__(kAttentionThreads)
    dp_rope_attention_kernel(DecoderConfig config, const float* inv_freq, T* qkv,
                             KvCacheLayer cache, DecodeBatch batch, T* out) {
  attention_body<T, V, true>(config, inv_freq, qkv, cache, batch, out);
}

template <class T, GemvInput Input, GemvOutput Output, int Split>
__global__ void __cluster_dims__(1, 1, Split) __launch_bounds__(kMmaWarps * 32)
    dp_gemv_cluster_kernel(const T* w, int out_features, int in_features, GemvIo io,
                           DecodeBatch batch) {
  gemv_body<T, Input, Output>(w, out_features, in_features, io, batch);
}

// Token selection with each position's parameters and the step's end
// (StepEndHooks), as on the graph path.
template <class T, int Blocks>
__global__ void __cluster_dims__(Blocks, 1, 1) __launch_bounds__(kSelectThreads)
    dp_select_and_end_kernel(DecoderStepView v, StepArgs args, const T* logits, DecodeBatch batch) {
  select_body<T, true>(v.config, logits, batch, decode::SelectParams(SamplingParams{}, v.sampling),
                       v.sequence_ids, v.sequence_steps, v.out_tokens, StepEndHooks{v, args});
}

// Launches one step's kernels into cudaStreamTailLaunch, in order, walking
// the model's GEMV plan (step_plan.h); after the first launch CUDA refuses,
// launches nothing more.
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
    for (std::uint32_t i = 0; i < s_.op_count && ok(); ++i) {
      const StepOp& op = s_.ops[i];
      switch (op.kind) {
        case StepOpKind::kStepBegin: {
          const unsigned blocks = (batch_ + kStepFrameThreads - 1) / kStepFrameThreads;
          dp_step_begin_kernel<<<blocks, kStepFrameThreads, 0, cudaStreamTailLaunch>>>(
              s_.view, args_, batch_);
          launched();
          break;
        }
        case StepOpKind::kRowNorm:
          row_norm(op);
          break;
        case StepOpKind::kGemv:
          gemv(op);
          break;
        case StepOpKind::kRopeAttention:
          rope_attention(op.cache);
          break;
        case StepOpKind::kSelectAndEnd:
          select_and_end();
          break;
        case StepOpKind::kSiluMul:
          silu_mul(op);
          break;
        case StepOpKind::kLinear:
          // Only the graph path's cuBLASLt plan has it; the model gives this
          // engine its GEMV plan.
          launch_.error = cudaErrorNotSupported;
          break;
      }
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

  __device__ void row_norm(const StepOp& op) {
    RowArgs a;
    a.source = op.row_source;
    a.tokens = s_.in_tokens;
    a.hidden = s_.hidden;
    a.weight = op.norm;
    a.out = s_.normed;
    const DecoderConfig& c = s_.view.config;
    switch (op.row_input) {
      case RowNormInput::kHidden:
        dp_row_norm_kernel<T, RowSource::kHidden>
            <<<batch_, kRowThreads, 0, cudaStreamTailLaunch>>>(c, a, db_);
        break;
      case RowNormInput::kEmbedding:
        dp_row_norm_kernel<T, RowSource::kEmbedding>
            <<<batch_, kRowThreads, 0, cudaStreamTailLaunch>>>(c, a, db_);
        break;
      case RowNormInput::kResidual:
        dp_row_norm_kernel<T, RowSource::kResidual>
            <<<batch_, kRowThreads, 0, cudaStreamTailLaunch>>>(c, a, db_);
        break;
    }
    launched();
  }

  __device__ void silu_mul(const StepOp& op) {
    const unsigned vectors = s_.view.config.ffn / kVector;
    const dim3 grid((vectors + kRowThreads - 1) / kRowThreads, batch_);
    dp_silu_mul_kernel<T><<<grid, kRowThreads, 0, cudaStreamTailLaunch>>>(
        s_.view.config, static_cast<const T*>(op.io.x), db_, static_cast<T*>(op.io.y));
    launched();
  }

  __device__ void rope_attention(const KvCacheLayer& cache) {
    const DecoderConfig& c = s_.view.config;
    const dim3 grid(batch_, c.heads);
    const unsigned shared_bytes = sizeof(float) * c.max_context;
    T* qkv = static_cast<T*>(s_.qkv);
    T* out = static_cast<T*>(s_.attention);
    if (c.head_dim % kVector == 0) {
      dp_rope_attention_kernel<T, kVector>
          <<<grid, kAttentionThreads, shared_bytes, cudaStreamTailLaunch>>>(c, s_.rope_inv_freq,
                                                                            qkv, cache, db_, out);
    } else {
      dp_rope_attention_kernel<T, 2>
          <<<grid, kAttentionThreads, shared_bytes, cudaStreamTailLaunch>>>(c, s_.rope_inv_freq,
                                                                            qkv, cache, db_, out);
    }
    launched();
  }

  // A GEMV with the graph path's grid: K split across a cluster of
  // gemv_split blocks (a function of the shape alone).
  __device__ void gemv(const StepOp& op) {
    switch (op.input) {
      case GemvInput::kPlain:
        if (op.output == GemvOutput::kStore) {
          gemv_split_of<GemvInput::kPlain, GemvOutput::kStore>(op);
        } else {
          gemv_split_of<GemvInput::kPlain, GemvOutput::kResidualAdd>(op);
        }
        break;
      case GemvInput::kGated:
        if (op.output == GemvOutput::kStore) {
          gemv_split_of<GemvInput::kGated, GemvOutput::kStore>(op);
        } else {
          gemv_split_of<GemvInput::kGated, GemvOutput::kResidualAdd>(op);
        }
        break;
      case GemvInput::kRmsNorm:
        gemv_split_of<GemvInput::kRmsNorm, GemvOutput::kStore>(op);
        break;
      case GemvInput::kEmbeddingRmsNorm:
        gemv_split_of<GemvInput::kEmbeddingRmsNorm, GemvOutput::kStore>(op);
        break;
    }
    launched();
  }

  template <GemvInput Input, GemvOutput Output>
  __device__ void gemv_split_of(const StepOp& op) {
    const int split = gemv_split(op.out_features, op.in_features);
    const dim3 grid((op.out_features + kMmaRows - 1) / kMmaRows,
                    (batch_ + kMmaPositions - 1) / kMmaPositions, split);
    gemv_cluster<Input, Output, 1>(split, grid, op);
  }

  // The instantiation whose compile-time cluster is `split` blocks.
  template <GemvInput Input, GemvOutput Output, int Split>
  __device__ void gemv_cluster(int split, dim3 grid, const StepOp& op) {
    if (split == Split) {
      dp_gemv_cluster_kernel<T, Input, Output, Split>
          <<<grid, kMmaWarps * 32, 0, cudaStreamTailLaunch>>>(
              static_cast<const T*>(op.w), op.out_features, op.in_features, op.io, db_);
    } else if constexpr (Split < kMmaMaxSplit) {
      gemv_cluster<Input, Output, Split + 1>(split, grid, op);
    }
  }

  // Token selection (each position's own parameters), a cluster of
  // select_blocks blocks per position, ending the step.
  __device__ void select_and_end() {
    const int blocks = select_blocks(s_.view.config.vocab);
    select_cluster<1>(blocks, dim3(blocks, batch_), static_cast<const T*>(s_.logits));
    launched();
  }

  template <int Blocks>
  __device__ void select_cluster(int blocks, dim3 grid, const T* logits) {
    if (blocks == Blocks) {
      dp_select_and_end_kernel<T, Blocks>
          <<<grid, kSelectThreads, 0, cudaStreamTailLaunch>>>(s_.view, args_, logits, db_);
    } else if constexpr (Blocks < kSelectMaxCluster) {
      select_cluster<Blocks + 1>(blocks, grid, logits);
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
