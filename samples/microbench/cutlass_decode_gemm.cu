// cutlass_decode_gemm: CUTLASS's sm90 GEMMs (TMA, warp-specialized, wgmma)
// on the decode step's projections, beside cuBLASLt, as issue #44 asks
// ("measure CUTLASS first as the reference"): y[N, M] = x[N, K] · W[M, K]^T
// in bf16 with fp32 accumulation for the Llama-3.2-1B shapes (QKV, attention
// output, gate|up, FFN down, LM head) at N = 16, 32, 64 and 128 rows. The
// weights are CUTLASS's A operand (M, K-major) and the rows its N ("swap
// A/B"), so a 64- or 128-row tile of weights meets every row at once.
// Configurations: the cooperative kernel with stream-K (128 x 32 and
// 128 x 64 tiles: K split so every SM streams weights) and the ping-pong
// kernel (64 x 32 tiles, data-parallel). Each launch is timed alone with
// events after a 256 MB write that evicts L2 (so the weights come from HBM),
// median of 21; GB/s counts the weights, inputs and outputs once. Outputs
// are checked against cuBLASLt's (largest difference relative to the largest
// output). Not part of the library: a kernel-level reference for deciding
// whether Baton's projections adopt CUTLASS (docs/wide-gemv.md).
//
// Built only with -DBATON_CUTLASS_INCLUDE=... (scripts/fetch_cutlass.sh
// fetches the nvidia-cutlass wheel's headers); sm_90a. Run:
// build/bin/cutlass_decode_gemm [c32] [c64] [pp] (about 20 seconds on an
// H100; "-" in a column not run).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

// A named namespace: nvcc's kernel stubs do not resolve an anonymous one
// that holds `using namespace cute`.
namespace decode_gemm_bench {

using cute::_1;
using cute::_64;
using cute::Int;
using cute::make_shape;
using cute::Shape;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cutlass_decode_gemm: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cutlass_decode_gemm: %s: cuBLAS status %d\n", what, static_cast<int>(s));
    std::exit(1);
  }
}

using Element = cutlass::bfloat16_t;
constexpr int kAlign = 8;  // 16 bytes

// One CUTLASS configuration: tile (M x N x K), mainloop and epilogue
// schedules, tile scheduler.
template <int TileM, int TileN, class Mainloop, class Epilogue, class Scheduler>
struct Cutlass {
  using TileShape = Shape<Int<TileM>, Int<TileN>, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Element,
      cutlass::layout::ColumnMajor, kAlign, Element, cutlass::layout::ColumnMajor, kAlign,
      Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor,
      kAlign, Element, cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      Mainloop>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  Gemm gemm;
  void* workspace = nullptr;

  // Prepares y = W x for W [m, k] (row-major), x [n, k], y [n, m]; false
  // where CUTLASS cannot run the shape.
  bool prepare(const Element* w, const Element* x, Element* y, int m, int n, int k, int sms) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = sms;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m, n, k, 1},
        {w, cutlass::make_cute_packed_stride(StrideA{}, make_shape(m, k, 1)), x,
         cutlass::make_cute_packed_stride(StrideB{}, make_shape(n, k, 1))},
        {{1.0f, 0.0f},
         y,
         cutlass::make_cute_packed_stride(StrideC{}, make_shape(m, n, 1)),
         y,
         cutlass::make_cute_packed_stride(StrideD{}, make_shape(m, n, 1))},
        hw};
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
    if (workspace != nullptr) cudaFree(workspace);
    workspace = nullptr;
    const std::size_t bytes = Gemm::get_workspace_size(args);
    if (bytes > 0) check(cudaMalloc(&workspace, bytes), "cutlass workspace");
    return gemm.initialize(args, workspace) == cutlass::Status::kSuccess;
  }
  bool run(cudaStream_t stream) { return gemm.run(stream) == cutlass::Status::kSuccess; }
  ~Cutlass() {
    if (workspace != nullptr) cudaFree(workspace);
  }
};

// Stream-K with the TMA epilogue hangs on some shapes (CUTLASS issues 1801
// and 1917; here the first, 3072 x 16 x 2048, on an H200): the stream-K
// kernels store through registers (NoSmemWarpSpecialized), as those issues'
// workaround does.
using CooperativeStreamK128x32 =
    Cutlass<128, 32, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
            cutlass::epilogue::NoSmemWarpSpecialized, cutlass::gemm::StreamKScheduler>;
using CooperativeStreamK128x64 =
    Cutlass<128, 64, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
            cutlass::epilogue::NoSmemWarpSpecialized, cutlass::gemm::StreamKScheduler>;
using PingPong64x32 =
    Cutlass<64, 32, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
            cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler>;

// cuBLASLt's best heuristic for the same product (the "TN" layout: W
// transposed, x as is, column-major views), with a 32 MB workspace.
struct Lt {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
  static constexpr std::size_t kWorkspace = 32u << 20;
  const void *w = nullptr, *x = nullptr;
  void* y = nullptr;

  Lt() {
    check(cublasLtCreate(&handle), "cublasLtCreate");
    check(cudaMalloc(&workspace, kWorkspace), "cuBLASLt workspace");
  }
  void release() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
    a = b = d = nullptr;
    op = nullptr;
  }
  ~Lt() {
    release();
    cudaFree(workspace);
    cublasLtDestroy(handle);
  }
  void prepare(const void* w_, const void* x_, void* y_, int m, int n, int k) {
    release();
    w = w_, x = x_, y = y_;
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)), "transa");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)),
          "transb");
    check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, m, k), "layout A");
    check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, n, k), "layout B");
    check(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, m, n, m), "layout D");
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &kWorkspace, sizeof(kWorkspace)),
          "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, d, d, pref, 1, &result, &found),
          "heuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
      std::fprintf(stderr, "cutlass_decode_gemm: cuBLASLt found no algorithm\n");
      std::exit(1);
    }
    algo = result.algo;
  }
  void run(cudaStream_t stream) {
    const float one = 1.0f, zero = 0.0f;
    check(cublasLtMatmul(handle, op, &one, w, a, x, b, &zero, y, d, y, d, &algo, workspace,
                         kWorkspace, stream),
          "cublasLtMatmul");
  }
};

__global__ void evict(uint4* p, std::size_t n, unsigned salt) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    p[i] = make_uint4(salt, salt, salt, salt);
  }
}
__global__ void fill(__nv_bfloat16* p, std::size_t n, std::uint32_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xFFFF) / 32768.0f - 1.0f) * scale);
  }
}

}  // namespace decode_gemm_bench

int main(int argc, char** argv) {
  using namespace decode_gemm_bench;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    std::printf("cutlass_decode_gemm: needs a Hopper (sm_90) GPU; skipped\n");
    return 0;
  }
  // The configurations to run: all, or those named (c32, c64, pp). A hung
  // kernel cannot be stopped within its process, so a script runs each
  // configuration in a process of its own.
  const auto wanted = [&](const char* name) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], name) == 0) return true;
    return false;
  };
  const int sms = prop.multiProcessorCount;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows survive a stopped run
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  struct Shape2 {
    const char* name;
    int m, k;
  };
  const Shape2 projections[] = {{"qkv", 3072, 2048},
                                {"attention output", 2048, 2048},
                                {"gate|up", 16384, 2048},
                                {"ffn down", 2048, 8192},
                                {"lm head", 128256, 2048}};
  const int rows[] = {16, 32, 64, 128};
  std::size_t most_w = 0, most_x = 0, most_y = 0;
  for (const Shape2& p : projections) {
    most_w = std::max(most_w, std::size_t(p.m) * p.k);
    most_x = std::max(most_x, std::size_t(128) * p.k);
    most_y = std::max(most_y, std::size_t(128) * p.m);
  }
  __nv_bfloat16 *w, *x, *y_lt, *y_cutlass;
  check(cudaMalloc(&w, most_w * 2), "weights");
  check(cudaMalloc(&x, most_x * 2), "inputs");
  check(cudaMalloc(&y_lt, most_y * 2), "outputs");
  check(cudaMalloc(&y_cutlass, most_y * 2), "outputs");
  const std::size_t evict_vectors = (256u << 20) / 16;
  uint4* eviction;
  check(cudaMalloc(&eviction, evict_vectors * 16), "eviction buffer");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<__nv_bfloat16> host_lt(most_y), host_cutlass(most_y);

  // A launch that has not finished in 10 s names itself and ends the run
  // (a hung configuration otherwise eats the whole device call silently).
  const char* running = "setup";
  const auto wait_bounded = [&](cudaEvent_t event) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    cudaError_t e;
    while ((e = cudaEventQuery(event)) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "cutlass_decode_gemm: %s did not finish in 10 s; stopping\n", running);
        std::_Exit(2);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    check(e, running);
  };
  const auto time_us = [&](auto&& launch) {
    std::vector<float> us;
    for (int i = 0; i < 23; ++i) {
      evict<<<sms * 4, 256, 0, stream>>>(eviction, evict_vectors, static_cast<unsigned>(i));
      check(cudaEventRecord(start, stream), "record");
      launch();
      check(cudaEventRecord(stop, stream), "record");
      wait_bounded(stop);
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
      if (i >= 2) us.push_back(ms * 1000.0f);  // two warm-ups
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  // Largest |cutlass - cuBLASLt| over the largest |cuBLASLt| output.
  const auto difference = [&](std::size_t n) {
    check(cudaMemcpy(host_lt.data(), y_lt, n * 2, cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(host_cutlass.data(), y_cutlass, n * 2, cudaMemcpyDeviceToHost), "copy");
    float most = 0.0f, diff = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const float a = __bfloat162float(host_lt[i]), b = __bfloat162float(host_cutlass[i]);
      most = std::max(most, std::abs(a));
      diff = std::max(diff, std::abs(a - b));
    }
    return most > 0.0f ? diff / most : diff;
  };

  std::printf("cutlass_decode_gemm on %s (%d SMs): us per launch (GB/s), bf16, L2 evicted\n",
              prop.name, sms);
  std::printf("%-17s %4s %18s %18s %18s %18s %9s\n", "projection", "rows", "cuBLASLt",
              "CUTLASS coop 128x32", "CUTLASS coop 128x64", "CUTLASS pp 64x32", "max diff");
  Lt lt;
  CooperativeStreamK128x32 coop32;
  CooperativeStreamK128x64 coop64;
  PingPong64x32 pingpong;
  bool all_match = true;
  for (const Shape2& p : projections) {
    fill<<<sms * 4, 256, 0, stream>>>(w, std::size_t(p.m) * p.k, 7u, 0.02f);
    for (const int n : rows) {
      fill<<<sms * 4, 256, 0, stream>>>(x, std::size_t(n) * p.k, 11u + n, 1.0f);
      check(cudaStreamSynchronize(stream), "fill");
      const double bytes = 2.0 * (double(p.m) * p.k + double(n) * p.k + double(n) * p.m);
      const auto cell = [&](float us) {
        static char text[4][32];
        static int at = 0;
        char* t = text[at++ % 4];
        if (us < 0.0f) {
          std::snprintf(t, 32, "%s", "-");
        } else {
          std::snprintf(t, 32, "%.1f (%.0f)", us, bytes / (us * 1e-6) / 1e9);
        }
        return t;
      };
      std::fprintf(stderr, "[%s, %d rows]\n", p.name, n);
      running = "cuBLASLt";
      lt.prepare(w, x, y_lt, p.m, n, p.k);
      const float lt_us = time_us([&] { lt.run(stream); });
      float worst = 0.0f;
      const auto cutlass_us = [&](auto& config, const char* name) {
        running = name;
        check(cudaMemset(y_cutlass, 0xFF, std::size_t(n) * p.m * 2), "poison");
        if (!config.prepare(reinterpret_cast<const Element*>(w),
                            reinterpret_cast<const Element*>(x),
                            reinterpret_cast<Element*>(y_cutlass), p.m, n, p.k, sms)) {
          return -1.0f;
        }
        const float us = time_us([&] {
          if (!config.run(stream)) {
            std::fprintf(stderr, "cutlass_decode_gemm: a CUTLASS launch failed\n");
            std::exit(1);
          }
        });
        check(cudaStreamSynchronize(stream), "cutlass");
        worst = std::max(worst, difference(std::size_t(n) * p.m));
        return us;
      };
      const float c32 = wanted("c32") ? cutlass_us(coop32, "CUTLASS cooperative 128x32") : -1.0f;
      const float c64 = wanted("c64") ? cutlass_us(coop64, "CUTLASS cooperative 128x64") : -1.0f;
      const float pp = wanted("pp") ? cutlass_us(pingpong, "CUTLASS ping-pong 64x32") : -1.0f;
      // Both accumulate in fp32 in their own orders: a few bf16 ulps apart.
      const bool match = worst < 0.02f;
      all_match = all_match && match;
      std::printf("%-17s %4d %18s %18s %18s %18s %9.4f%s\n", p.name, n, cell(lt_us), cell(c32),
                  cell(c64), cell(pp), worst, match ? "" : " MISMATCH");
    }
  }
  std::printf(all_match ? "Passed: every CUTLASS output matches cuBLASLt's\n"
                        : "FAILED: a CUTLASS output differs from cuBLASLt's\n");
  return all_match ? 0 : 1;
}
