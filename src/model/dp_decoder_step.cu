// The decoder model's step launched from the device (its DeviceStepProgram):
// the same kernel bodies as the graph path (decoder_step_body.cuh and the
// src/kernels .cuh bodies), walking the plan kBatonGemv captures for the
// step's bucket (step_plan.h: the GEMV plan with fused attention up to
// max_batch rows, the GEMM plan with the appended chunks' attention above),
// with grids sized for the actual rows and sequences.
//
// A device launch carries no launch attributes: no programmatic dependent
// launch (the bodies' griddepcontrol calls are no-ops, and tail launches run
// one after another anyway) and no cluster dimensions set at launch. The
// cluster kernels (GEMV split-K, token selection) therefore come with
// compile-time __cluster_dims__, one instantiation per cluster size (a
// function of the shape alone, 1 to 8): measured on an H200 (CUDA 13.0,
// driver 580), such a kernel launched with <<<>>> into cudaStreamTailLaunch
// runs as clusters (cluster.num_blocks() as compiled, distributed shared
// memory works), so every engine sums in the same order. The GEMM's bits do
// not depend on its tile, so one tile serves every device launch.
#include <cstdint>

#include "decoder_device_step.h"
#include "decoder_step_body.cuh"
#include "engines/dp_scheduler.cuh"
#include "kernels/attention_body.cuh"
#include "kernels/chunk_attention_body.cuh"
#include "kernels/gemm_body.cuh"
#include "kernels/gemv_body.cuh"
#include "kernels/row_kernel_body.cuh"
#include "kernels/select_body.cuh"
#include "step_launch.h"

namespace baton::detail {
namespace {

using decode::attention_body;
using decode::gemv_body;
using decode::gemv_split;
using decode::GemvInput;
using decode::GemvIo;
using decode::GemvOutput;
using decode::kAttentionMinBlocks;
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

// The device launches' GEMM tile (any tile gives the same bits).
using DeviceGemmTile = decode::GemmTile64x128x64;

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

template <class T, int V, int H, bool Rope, bool Split>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionMinBlocks)
    dp_attention_kernel(DecoderConfig config, const float* inv_freq, T* qkv, KvCacheLayer cache,
                        DecodeBatch batch, AttentionScratch scratch, AttentionShortRows short_rows,
                        T* out) {
  __shared__ decode::AttentionShared<T, V, H, Split> shared;
  extern __shared__ __align__(16) float scores[];  // attention_launch_shape's shared_bytes
  attention_body<T, V, H, Rope, Split>(config, inv_freq, qkv, cache, batch, scratch, short_rows,
                                       shared, scores, out);
}

// Launches the attention's instantiation for (V, H) from the device, into
// the tail-launch stream, on the grid of the actual rows.
template <class T, bool Rope>
struct DpAttentionLaunch {
  const DecoderConfig& config;
  const float* inv_freq;
  T* qkv;
  KvCacheLayer cache;
  DecodeBatch batch;
  AttentionScratch scratch;
  AttentionShortRows short_rows;
  T* out;
  template <int V, int H>
  __device__ cudaError_t operator()() const {
    const decode::AttentionLaunchShape shape =
        decode::attention_launch_shape(config, batch.capacity, short_rows);
    if (shape.split) {
      dp_attention_kernel<T, V, H, Rope, true>
          <<<shape.grid, kAttentionThreads, shape.shared_bytes, cudaStreamTailLaunch>>>(
              config, inv_freq, qkv, cache, batch, scratch, short_rows, out);
    } else {  // (the single-pass kernel has no use for H: one instantiation)
      dp_attention_kernel<T, V, 4, Rope, false>
          <<<shape.grid, kAttentionThreads, shape.shared_bytes, cudaStreamTailLaunch>>>(
              config, inv_freq, qkv, cache, batch, scratch, short_rows, out);
    }
    return cudaSuccess;  // the launcher reads the launch's error
  }
};

template <class T, int V>
__global__ void __launch_bounds__(decode::kRopeAppendThreads)
    dp_rope_append_kernel(DecoderConfig config, const float* inv_freq, T* qkv, KvCacheLayer cache,
                          DecodeBatch batch) {
  decode::rope_append_body<T, V>(config, inv_freq, qkv, cache, batch);
}

template <class T, int D>
__global__ void __launch_bounds__(chunk::kThreads)
    dp_chunk_attention_kernel(DecoderConfig config, const T* qkv, KvCacheLayer cache,
                              ChunkAttentionBatch batch, T* out) {
  extern __shared__ __align__(16) unsigned char chunk_shared[];
  chunk::chunk_attention_body<T, D>(
      config, qkv, cache, batch, out,
      *reinterpret_cast<chunk::ChunkAttentionShared<T, D>*>(chunk_shared));
}

template <class T, GemvInput Input, GemvOutput Output, int Split>
__global__ void __cluster_dims__(1, 1, Split) __launch_bounds__(kMmaWarps * 32)
    dp_gemv_cluster_kernel(const T* w, int out_features, int in_features, GemvIo io,
                           DecodeBatch batch) {
  gemv_body<T, Input, Output>(w, out_features, in_features, io, batch);
}

template <class T>
__global__ void __launch_bounds__(DeviceGemmTile::kThreads, DeviceGemmTile::kMinBlocks)
    dp_gemm_kernel(const T* w, int out_features, int in_features, GemvIo io, DecodeBatch batch) {
  extern __shared__ __align__(128) char shared[];
  decode::gemm_body<T, GemvOutput::kStore, DeviceGemmTile>(w, out_features, in_features, io, batch,
                                                           shared);
}

// Token selection with each position's parameters and the step's end
// (StepEndHooks), as on the graph path.
template <class T, int Blocks>
__global__ void __cluster_dims__(Blocks, 1, 1) __launch_bounds__(kSelectThreads)
    dp_select_and_end_kernel(DecoderStepView v, StepArgs args, const T* logits, DecodeBatch batch) {
  select_body<T, true>(v.config, logits, batch, decode::SelectParams(SamplingParams{}, v.sampling),
                       v.sequence_ids, v.sequence_steps, v.out_tokens, StepEndHooks{v, args});
}

// Launches the chunk attention's instantiation for head size D from the
// device, into the tail-launch stream.
template <class T>
struct ChunkLaunch {
  DecoderConfig config;
  dim3 grid;
  const T* qkv;
  KvCacheLayer cache;
  ChunkAttentionBatch chunks;
  T* out;
  template <int D>
  __device__ cudaError_t operator()() const {
    dp_chunk_attention_kernel<T, D>
        <<<grid, chunk::kThreads, chunk::kSharedBytes<T, D>, cudaStreamTailLaunch>>>(
            config, qkv, cache, chunks, out);
    return cudaSuccess;  // the launcher reads the launch's error
  }
};

// Opts head size D's instantiation in to its dynamic shared memory (host).
template <class T>
struct ChunkOptIn {
  template <int D>
  cudaError_t operator()() const {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(dp_chunk_attention_kernel<T, D>),
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(chunk::kSharedBytes<T, D>));
  }
};

// Launches one step's kernels into cudaStreamTailLaunch, in order, walking
// the bucket's plan; after the first launch CUDA refuses, launches nothing
// more.
template <class T>
class DecoderStepLauncher {
 public:
  __device__ DecoderStepLauncher(const DecoderDeviceStep& step, const StepArgs& args,
                                 std::uint32_t batch)
      : s_(step),
        args_(args),
        sequences_(batch),
        rows_(args.header->tokens),
        prefill_(IsChunkStep(args.header->bucket_size, step.view.max_batch)) {}

  __device__ DeviceStepLaunch run() {
    const StepOp* ops = prefill_ ? s_.prefill_ops : s_.decode_ops;
    const std::uint32_t count = prefill_ ? s_.prefill_count : s_.decode_count;
    for (std::uint32_t i = 0; i < count && ok(); ++i) {
      const StepOp& op = ops[i];
      // Settled: launches into the tail stream run one after another, so
      // everything a kernel reads was written by finished grids.
      DecodeBatch db = StepOpBatch(s_.view, args_, op, rows_, sequences_);
      db.settled = true;
      db.launch_next_early = false;
      // A step of sequences that all wait for budget has no rows: its layer
      // kernels have nothing to do (and a grid of 0 blocks is refused).
      if (!op.sequences && op.kind != StepOpKind::kStepBegin && rows_ == 0) continue;
      switch (op.kind) {
        case StepOpKind::kStepBegin:
          dp_step_begin_kernel<<<sequences_, kStepFrameThreads, 0, cudaStreamTailLaunch>>>(
              s_.view, args_, sequences_);
          launched();
          break;
        case StepOpKind::kRowNorm:
          row_norm(op, db);
          break;
        case StepOpKind::kGemv:
          gemv(op, db);
          break;
        case StepOpKind::kGemm:
          gemm(op, db);
          break;
        case StepOpKind::kRopeAttention:
        case StepOpKind::kRowAttention:
          attention(op, db);
          break;
        case StepOpKind::kRopeAppend:
          rope_append(op, db);
          break;
        case StepOpKind::kChunkAttention:
          chunk_attention(op);
          break;
        case StepOpKind::kSelectAndEnd:
          select_and_end(db);
          break;
        case StepOpKind::kSiluMul:
          silu_mul(op, db);
          break;
        case StepOpKind::kLinear:
        case StepOpKind::kWideGemv:
          // Only the graph path's cuBLASLt and wide-GEMV plans have them;
          // the model gives this engine the GEMV and GEMM plans.
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

  __device__ void row_norm(const StepOp& op, const DecodeBatch& db) {
    RowArgs a;
    a.source = op.row_source;
    a.tokens = s_.buffers.in_tokens;
    a.hidden = s_.buffers.hidden;
    a.weight = op.norm;
    a.out = s_.buffers.normed;
    const DecoderConfig& c = s_.view.config;
    switch (op.row_input) {
      case RowNormInput::kHidden:
        dp_row_norm_kernel<T, RowSource::kHidden>
            <<<db.capacity, kRowThreads, 0, cudaStreamTailLaunch>>>(c, a, db);
        break;
      case RowNormInput::kEmbedding:
        dp_row_norm_kernel<T, RowSource::kEmbedding>
            <<<db.capacity, kRowThreads, 0, cudaStreamTailLaunch>>>(c, a, db);
        break;
      case RowNormInput::kResidual:
        dp_row_norm_kernel<T, RowSource::kResidual>
            <<<db.capacity, kRowThreads, 0, cudaStreamTailLaunch>>>(c, a, db);
        break;
    }
    launched();
  }

  __device__ void silu_mul(const StepOp& op, const DecodeBatch& db) {
    const unsigned vectors = s_.view.config.ffn / kVector;
    const dim3 grid((vectors + kRowThreads - 1) / kRowThreads, db.capacity);
    dp_silu_mul_kernel<T><<<grid, kRowThreads, 0, cudaStreamTailLaunch>>>(
        s_.view.config, static_cast<const T*>(op.io.x), db, static_cast<T*>(op.io.y));
    launched();
  }

  // The fused kernel (kRopeAttention) or the one reading every key from the
  // cache after an append (kRowAttention), split along the context.
  __device__ void attention(const StepOp& op, const DecodeBatch& db) {
    const DecoderConfig& c = s_.view.config;
    T* qkv = static_cast<T*>(s_.buffers.qkv);
    T* out = static_cast<T*>(s_.buffers.attention);
    const AttentionScratch& scratch = s_.buffers.attention_scratch;
    if (op.kind == StepOpKind::kRopeAttention) {
      decode::dispatch_attention(c, DpAttentionLaunch<T, true>{c, s_.rope_inv_freq, qkv, op.cache,
                                                               db, scratch, op.short_rows, out});
    } else {
      decode::dispatch_attention(c, DpAttentionLaunch<T, false>{c, s_.rope_inv_freq, qkv, op.cache,
                                                                db, scratch, op.short_rows, out});
    }
    launched();
  }

  __device__ void rope_append(const StepOp& op, const DecodeBatch& db) {
    const DecoderConfig& c = s_.view.config;
    T* qkv = static_cast<T*>(s_.buffers.qkv);
    if (c.head_dim % kVector == 0) {
      dp_rope_append_kernel<T, kVector>
          <<<db.capacity, decode::kRopeAppendThreads, 0, cudaStreamTailLaunch>>>(
              c, s_.rope_inv_freq, qkv, op.cache, db);
    } else {
      dp_rope_append_kernel<T, 2>
          <<<db.capacity, decode::kRopeAppendThreads, 0, cudaStreamTailLaunch>>>(
              c, s_.rope_inv_freq, qkv, op.cache, db);
    }
    launched();
  }

  // The grid covers the actual rows and live sequences (chunk_attention.h).
  __device__ void chunk_attention(const StepOp& op) {
    const DecoderConfig& c = s_.view.config;
    const ChunkAttentionBatch chunks = StepChunks(s_.view, args_, op, rows_, sequences_);
    const dim3 grid = chunk_attention_grid(c, sequences_, rows_);
    const T* qkv = static_cast<const T*>(s_.buffers.qkv);
    T* out = static_cast<T*>(s_.buffers.attention);
    // AttentionFor sends no other head size here.
    if (chunk::with_head_dim(c.head_dim, ChunkLaunch<T>{c, grid, qkv, op.cache, chunks, out}) !=
        cudaSuccess) {
      launch_.error = cudaErrorInvalidValue;
      return;
    }
    launched();
  }

  // Baton's GEMM over the actual rows (its output stored; the plan's row
  // kernels add the residuals).
  __device__ void gemm(const StepOp& op, const DecodeBatch& db) {
    const dim3 grid(DeviceGemmTile::row_tiles(db.capacity),
                    DeviceGemmTile::feature_tiles(op.out_features));
    dp_gemm_kernel<T>
        <<<grid, DeviceGemmTile::kThreads, DeviceGemmTile::kSharedBytes, cudaStreamTailLaunch>>>(
            static_cast<const T*>(op.w), op.out_features, op.in_features, op.io, db);
    launched();
  }

  // A GEMV with the graph path's grid: K split across a cluster of
  // gemv_split blocks (a function of the shape alone).
  __device__ void gemv(const StepOp& op, const DecodeBatch& db) {
    switch (op.input) {
      case GemvInput::kPlain:
        if (op.output == GemvOutput::kStore) {
          gemv_split_of<GemvInput::kPlain, GemvOutput::kStore>(op, db);
        } else if (op.output == GemvOutput::kSiluMul) {
          gemv_split_of<GemvInput::kPlain, GemvOutput::kSiluMul>(op, db);
        } else {
          gemv_split_of<GemvInput::kPlain, GemvOutput::kResidualAdd>(op, db);
        }
        break;
      case GemvInput::kGated:
        // The plan makes SiLU * up in the gate | up GEMV's output instead.
        launch_.error = cudaErrorNotSupported;
        return;
      case GemvInput::kRmsNorm:
        if (op.output == GemvOutput::kSiluMul) {
          gemv_split_of<GemvInput::kRmsNorm, GemvOutput::kSiluMul>(op, db);
        } else {
          gemv_split_of<GemvInput::kRmsNorm, GemvOutput::kStore>(op, db);
        }
        break;
      case GemvInput::kEmbeddingRmsNorm:
        gemv_split_of<GemvInput::kEmbeddingRmsNorm, GemvOutput::kStore>(op, db);
        break;
    }
    launched();
  }

  template <GemvInput Input, GemvOutput Output>
  __device__ void gemv_split_of(const StepOp& op, const DecodeBatch& db) {
    const int split = gemv_split(op.out_features, op.in_features);
    const dim3 grid((op.out_features + kMmaRows - 1) / kMmaRows,
                    (db.capacity + kMmaPositions - 1) / kMmaPositions, split);
    gemv_cluster<Input, Output, 1>(split, grid, op, db);
  }

  // The instantiation whose compile-time cluster is `split` blocks.
  template <GemvInput Input, GemvOutput Output, int Split>
  __device__ void gemv_cluster(int split, dim3 grid, const StepOp& op, const DecodeBatch& db) {
    if (split == Split) {
      dp_gemv_cluster_kernel<T, Input, Output, Split>
          <<<grid, kMmaWarps * 32, 0, cudaStreamTailLaunch>>>(
              static_cast<const T*>(op.w), op.out_features, op.in_features, op.io, db);
    } else if constexpr (Split < kMmaMaxSplit) {
      gemv_cluster<Input, Output, Split + 1>(split, grid, op, db);
    }
  }

  // Token selection (each position's own parameters), a cluster of
  // select_blocks blocks per position, ending the step.
  __device__ void select_and_end(const DecodeBatch& db) {
    const int blocks = select_blocks(s_.view.config.vocab);
    select_cluster<1>(blocks, dim3(blocks, db.capacity), static_cast<const T*>(s_.buffers.logits),
                      db);
    launched();
  }

  template <int Blocks>
  __device__ void select_cluster(int blocks, dim3 grid, const T* logits, const DecodeBatch& db) {
    if (blocks == Blocks) {
      dp_select_and_end_kernel<T, Blocks>
          <<<grid, kSelectThreads, 0, cudaStreamTailLaunch>>>(s_.view, args_, logits, db);
    } else if constexpr (Blocks < kSelectMaxCluster) {
      select_cluster<Blocks + 1>(blocks, grid, logits, db);
    }
  }

  const DecoderDeviceStep& s_;
  const StepArgs& args_;
  const std::uint32_t sequences_;  // live positions
  const std::uint32_t rows_;       // live rows
  const bool prefill_;
  DeviceStepLaunch launch_;
};

// Device launches take a kernel's dynamic shared memory limit as the host
// set it: every instantiation past 48 KB opts in here.
template <class T>
cudaError_t prepare() {
  cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(dp_gemm_kernel<T>),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(DeviceGemmTile::kSharedBytes));
  for (int d = chunk::kMinHeadDim; d <= chunk::kMaxHeadDim && e == cudaSuccess; d += 16) {
    e = chunk::with_head_dim(d, ChunkOptIn<T>{});
  }
  // The split attention's tensor-core ring (only 16-byte loads take it).
  const auto attention = [&](const void* kernel) {
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kAttentionMmaMaxBytes));
    }
  };
  attention(reinterpret_cast<const void*>(dp_attention_kernel<T, decode::kVector, 4, true, true>));
  attention(reinterpret_cast<const void*>(dp_attention_kernel<T, decode::kVector, 8, true, true>));
  attention(reinterpret_cast<const void*>(dp_attention_kernel<T, decode::kVector, 4, false, true>));
  attention(reinterpret_cast<const void*>(dp_attention_kernel<T, decode::kVector, 8, false, true>));
  return e;
}

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

cudaError_t PrepareDecoderDynamicParallelism() {
  static const cudaError_t prepared = [] {
    const cudaError_t e = prepare<__half>();
    return e == cudaSuccess ? prepare<__nv_bfloat16>() : e;
  }();
  return prepared;
}

}  // namespace baton::detail
