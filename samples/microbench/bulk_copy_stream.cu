// bulk_copy_stream: how fast a block can stream weight rows (row-major, 2048
// bf16 columns, 512 MB) into shared memory on a Hopper GPU, by each way a
// projection kernel could fetch them: plain 16-byte loads into registers,
// one-dimensional bulk copies (cp.async.bulk: the TMA unit, one instruction
// per row segment) issued by one warp or by several, and two-dimensional
// tensor-map boxes (cp.async.bulk.tensor.2d, one instruction per box). Each
// block walks tiles of 128 rows in chunks of `elems` columns through a ring
// of `stages` shared-memory stages, one mbarrier per stage counting the
// bytes, and touches every staged vector (a stand-in for the mmas). Prints
// GB/s per configuration (the best of 5 runs after a warm-up).
//
// A hardware fact the wide GEMV's design rests on (docs/wide-gemv.md, "Tried
// and dropped: a bulk-copy ring"), not part of the library's API. Never the
// .multicast::cluster forms. Run: build/bin/bulk_copy_stream (about a second).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kCols = 2048;
constexpr int kTileRows = 128;
constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bulk_copy_stream: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ void barrier_init(std::uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(b)), "r"(count)
               : "memory");
}
__device__ void barrier_expect(std::uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(b)),
               "r"(bytes)
               : "memory");
}
__device__ void barrier_wait(std::uint64_t* b, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(smem_address(b)), "r"(parity)
        : "memory");
  } while (done == 0);
}
__device__ void copy_1d(void* dst, const void* src, unsigned bytes, std::uint64_t* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(b))
      : "memory");
}
__device__ void copy_2d(void* dst, const CUtensorMap* map, int x, int y, std::uint64_t* b) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3}], [%4];" ::"r"(smem_address(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_address(b))
      : "memory");
}

struct Case {
  bool tensor;  // 2-D boxes of {box, 128 rows}, else one 1-D copy per row
  int elems;    // columns per chunk
  int stages;   // ring stages per block
  int blocks_per_sm;
  int issuers;  // 1-D: warps that issue the copies (lanes take rows in turn)
  int box;      // 2-D: columns per box
};

extern __shared__ __align__(128) unsigned char shared_bytes[];

__global__ void __launch_bounds__(kThreads)
    stream_ring(const __nv_bfloat16* w, int rows, Case c, const __grid_constant__ CUtensorMap map,
                float* sink) {
  const int stage_bytes = kTileRows * c.elems * 2;
  auto* bars = reinterpret_cast<std::uint64_t*>(shared_bytes + c.stages * stage_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < c.stages; ++s) barrier_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int chunks_per_tile = kCols / c.elems;
  int tiles = 0;
  for (int t = blockIdx.x; t < rows / kTileRows; t += gridDim.x) ++tiles;
  const int chunks = tiles * chunks_per_tile;
  const auto fill = [&](int q) {
    const int tile = blockIdx.x + q / chunks_per_tile * gridDim.x;
    const int col = q % chunks_per_tile * c.elems;
    unsigned char* dst = shared_bytes + q % c.stages * stage_bytes;
    std::uint64_t* bar = &bars[q % c.stages];
    if (threadIdx.x == 0) barrier_expect(bar, stage_bytes);
    if (c.tensor) {
      if (threadIdx.x == 0) {
        for (int x = 0; x < c.elems; x += c.box) {
          copy_2d(dst + x * kTileRows * 2, &map, col + x, tile * kTileRows, bar);
        }
      }
    } else if (warp < c.issuers) {
      for (int r = warp * 32 + lane; r < kTileRows; r += c.issuers * 32) {
        copy_1d(dst + r * c.elems * 2, w + (std::size_t(tile) * kTileRows + r) * kCols + col,
                c.elems * 2, bar);
      }
    }
  };
  for (int q = 0; q < c.stages && q < chunks; ++q) fill(q);
  float acc = 0.0f;
  for (int q = 0; q < chunks; ++q) {
    barrier_wait(&bars[q % c.stages], (q / c.stages) & 1);
    const auto* staged = reinterpret_cast<const uint4*>(shared_bytes + q % c.stages * stage_bytes);
    for (int i = threadIdx.x; i < stage_bytes / 16; i += kThreads) {
      acc += __uint_as_float(staged[i].x ^ staged[i].w);
    }
    __syncthreads();
    if (q + c.stages < chunks) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      fill(q + c.stages);
    }
  }
  if (acc == 1.2345f) *sink = acc;  // keeps the reads
}

// Plain 16-byte streaming loads, 8 per thread in flight.
__global__ void __launch_bounds__(kThreads)
    stream_loads(const __nv_bfloat16* w, int rows, float* sink) {
  constexpr int kDepth = 8;
  const auto* p = reinterpret_cast<const uint4*>(w);
  const std::size_t n = std::size_t(rows) * kCols / 8;
  float acc = 0.0f;
  for (std::size_t i = std::size_t(blockIdx.x) * kThreads * kDepth + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * kThreads * kDepth) {
    uint4 v[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d)
      v[d] = i + d * kThreads < n ? __ldcs(p + i + d * kThreads) : uint4{};
#pragma unroll
    for (int d = 0; d < kDepth; ++d) acc += __uint_as_float(v[d].x ^ v[d].w);
  }
  if (acc == 1.2345f) *sink = acc;
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major < 9) {
    std::printf("bulk_copy_stream: needs a Hopper (sm_90) GPU; skipped\n");
    return 0;
  }
  sms = prop.multiProcessorCount;
  const int rows = 128 * 1024;
  const std::size_t bytes = std::size_t(rows) * kCols * 2;
  __nv_bfloat16* w = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&w, bytes), "cudaMalloc");
  check(cudaMemset(w, 1, bytes), "cudaMemset");
  check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found{};
  check(
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode),
                                       12000, cudaEnableDefault, &found),
      "cuTensorMapEncodeTiled");
  const auto map_for = [&](int box) {
    CUtensorMap map{};
    const cuuint64_t dims[2] = {kCols, cuuint64_t(rows)};
    const cuuint64_t strides[1] = {kCols * 2};
    const cuuint32_t box_dims[2] = {cuuint32_t(box), kTileRows};
    const cuuint32_t element_strides[2] = {1, 1};
    if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, w, dims, strides, box_dims,
               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
      std::fprintf(stderr, "bulk_copy_stream: cuTensorMapEncodeTiled failed\n");
      std::exit(1);
    }
    return map;
  };
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  const auto gbs = [&](auto launch) {
    launch();
    check(cudaDeviceSynchronize(), "warm-up");
    float best = 1e30f;
    for (int i = 0; i < 5; ++i) {
      cudaEventRecord(start);
      launch();
      cudaEventRecord(stop);
      check(cudaEventSynchronize(stop), "run");
      float ms = 0.0f;
      cudaEventElapsedTime(&ms, start, stop);
      best = ms < best ? ms : best;
    }
    return double(bytes) / (best * 1e-3) / 1e9;
  };
  std::printf("bulk_copy_stream on %s: a 512 MB stream of 4 KB rows into shared memory, GB/s\n",
              prop.name);
  std::printf("plain 16-byte loads, 4 blocks per SM: %.0f\n",
              gbs([&] { stream_loads<<<sms * 4, kThreads>>>(w, rows, sink); }));
  const CUtensorMap unused = map_for(32);
  const Case cases[] = {
      {false, 128, 2, 2, 1, 0}, {false, 128, 4, 1, 1, 0},  {false, 128, 2, 2, 8, 0},
      {false, 128, 3, 2, 8, 0}, {false, 128, 4, 1, 8, 0},  {false, 128, 6, 1, 8, 0},
      {false, 256, 2, 1, 1, 0}, {false, 256, 2, 1, 8, 0},  {false, 256, 3, 1, 8, 0},
      {false, 64, 4, 2, 8, 0},  {true, 128, 2, 2, 1, 32},  {true, 128, 4, 1, 1, 32},
      {true, 128, 2, 2, 1, 64}, {true, 128, 4, 1, 1, 128}, {true, 64, 4, 2, 1, 32},
      {true, 256, 3, 1, 1, 64},
  };
  for (const Case& c : cases) {
    const int smem = c.stages * kTileRows * c.elems * 2 + 64;
    check(cudaFuncSetAttribute(stream_ring, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "shared memory limit");
    const CUtensorMap map = c.tensor ? map_for(c.box) : unused;
    const double rate =
        gbs([&] { stream_ring<<<sms * c.blocks_per_sm, kThreads, smem>>>(w, rows, c, map, sink); });
    check(cudaGetLastError(), "launch");
    if (c.tensor) {
      std::printf("2-D boxes of %3d columns, %4d-byte chunks, %d stages, %d blocks per SM: %.0f\n",
                  c.box, c.elems * 2, c.stages, c.blocks_per_sm, rate);
    } else {
      std::printf(
          "1-D copies of %4d bytes, %d stages, %d blocks per SM, %d issuing warp(s): %.0f\n",
          c.elems * 2, c.stages, c.blocks_per_sm, c.issuers, rate);
    }
  }
  return 0;
}
