// Tensor parallelism's exchange between the ranks inside the step (issue
// #42): the one-shot all-reduce over peer memory (collective/all_reduce.cuh)
// as an op of the table, so every launch path runs it as a plain kernel node
// (a device-launched graph holds nothing else). Three uses:
//
//   kSum            out = the ranks' sum of `in` (T rows; the cuBLASLt and
//                   GEMM plans' residual norm then adds it)
//   kAddToResidual  residual += the ranks' sum (fp32 rows: the GEMV plans,
//                   whose projections' residual add moves here)
//   kGather         out row r = every rank's `in` row r side by side, rank q
//                   at column q * width (each rank's slice of the logits
//                   into the whole vocabulary's row)
//
// The sum is in rank order in float, so every rank holds the same bits. It
// covers the launch's live rows (*batch.active of the step's rows, or its
// sequences), `width` elements each; every rank runs the same steps, so the
// ranks agree on the count. A fixed grid of view.blocks blocks of
// kAllReduceThreads (the group's: block b's staging, flags and counter are
// its own), a few bytes of shared memory. Refused: a view of fewer than two
// ranks, a width that is not whole 16-byte vectors, a capacity whose rows
// exceed the group's staging (PeerGroupOptions::max_bytes), unaligned or
// missing pointers.
#pragma once

#include <cstdint>

#include "collective/all_reduce_view.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "collective/all_reduce.cuh"
#endif

namespace baton::ops {

struct AllReduce : KernelOp {
  static constexpr const char* kName = "all_reduce";
  enum class Mode : std::uint32_t { kSum = 0, kAddToResidual = 1, kGather = 2 };
  struct Args {
    using Op = AllReduce;
    detail::AllReduceView view;  // this rank's (PeerGroup::view)
    DecodeBatch batch;           // the rows (or sequences) covered: active and capacity
    DecoderDType dtype = DecoderDType::kBFloat16;
    Mode mode = Mode::kSum;
    std::uint32_t width = 0;       // elements per row of `in`
    std::uint32_t out_stride = 0;  // elements per row of `out` (kGather: ranks * width)
    const void* in = nullptr;      // T [capacity, width]
    void* out = nullptr;           // T (kSum: [capacity, width]; kGather: [capacity, out_stride])
    float* residual = nullptr;     // kAddToResidual: fp32 [capacity, width]
  };

  static Args sum(const detail::AllReduceView& view, DecoderDType dtype, std::uint32_t width,
                  const void* in, void* out, DecodeBatch batch) {
    return {view, batch, dtype, Mode::kSum, width, width, in, out, nullptr};
  }
  static Args add_to_residual(const detail::AllReduceView& view, DecoderDType dtype,
                              std::uint32_t width, const void* in, float* residual,
                              DecodeBatch batch) {
    return {view, batch, dtype, Mode::kAddToResidual, width, width, in, nullptr, residual};
  }
  static Args gather(const detail::AllReduceView& view, DecoderDType dtype, std::uint32_t width,
                     const void* in, void* out, DecodeBatch batch) {
    return {view, batch, dtype, Mode::kGather, width, width * view.ranks, in, out, nullptr};
  }

  static cudaError_t check(const Args& a) {
    const detail::AllReduceView& v = a.view;
    constexpr int kVector = detail::decode::kVector;
    const bool group = v.ranks >= 2 && v.ranks <= kMaxPeerRanks && v.rank < v.ranks &&
                       v.blocks >= 1 && v.blocks <= detail::kMaxAllReduceBlocks &&
                       v.calls != nullptr && v.fault != nullptr;
    const std::size_t vectors = std::size_t{a.batch.capacity} * a.width / kVector;
    const bool fits = vectors <= std::size_t{v.blocks} * v.region_vectors;
    bool outputs = false;
    switch (a.mode) {
      case Mode::kSum:
        outputs = a.out != nullptr && aligned16(a.out) && a.out_stride == a.width;
        break;
      case Mode::kAddToResidual:
        outputs = a.residual != nullptr && aligned16(a.residual);
        break;
      case Mode::kGather:
        outputs = a.out != nullptr && aligned16(a.out) && a.out_stride == a.width * v.ranks;
        break;
    }
    return group && fits && outputs && a.width > 0 && a.width % kVector == 0 && a.in != nullptr &&
                   aligned16(a.in) && a.batch.active != nullptr
               ? cudaSuccess
               : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  template <class T>
  struct Variant : Block<T, detail::kAllReduceThreads> {};
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    // Every rank launches the same grid whatever its rows (the blocks'
    // flags pair up across ranks); an empty bucket launches nothing.
    const LaunchShape shape{dim3(a.batch.capacity == 0 ? 0 : a.view.blocks),
                            dim3(detail::kAllReduceThreads), dim3(1, 1, 1),
                            align_shared(sizeof(detail::PeerExchangeShared))};
    return with_dtype(a.dtype, [&](auto t) { return f(Variant<decltype(t)>{}, shape); });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    using detail::decode::kVector;
    const std::uint32_t rows = detail::decode::enter_step_node_active(a.batch);
    // A step of no rows exchanges nothing and leaves the barrier's counters
    // alone: only an engine's emptied steps have none (a multi-step graph's
    // steps after its decision), and ranks in lockstep run the same real
    // steps but not always the same emptied ones (docs/DESIGN.md).
    if (rows == 0) return;
    const std::size_t vectors = std::size_t{rows} * a.width / kVector;
    const auto* in = static_cast<const uint4*>(a.in);
    auto& exchange = shared_as<detail::PeerExchangeShared>(shared);
    const detail::AllReduceView& v = a.view;
    switch (a.mode) {
      case Mode::kSum:
        detail::all_reduce_body<T>(v, in, static_cast<uint4*>(a.out), vectors, tile.x, exchange);
        break;
      case Mode::kAddToResidual:
        detail::peer_exchange(
            v, in, vectors, tile.x, exchange,
            [&](std::size_t i, const uint4(&x)[kMaxPeerRanks]) {
              float acc[kVector];
              detail::sum_in_rank_order<T>(v, x, acc);
              float* r = a.residual + i * kVector;
              detail::decode::Floats8 h = detail::decode::load_floats8(r);
#pragma unroll
              for (int e = 0; e < kVector; ++e) h.v[e] += acc[e];
              detail::decode::store_floats8(r, h);
            });
        break;
      case Mode::kGather: {
        const std::size_t row_vectors = a.width / kVector;
        const std::size_t out_vectors = a.out_stride / kVector;
        auto* out = static_cast<uint4*>(a.out);
        detail::peer_exchange(v, in, vectors, tile.x, exchange,
                              [&](std::size_t i, const uint4(&x)[kMaxPeerRanks]) {
                                const std::size_t row = i / row_vectors, col = i % row_vectors;
                                uint4* o = out + row * out_vectors + col;
#pragma unroll
                                for (std::uint32_t q = 0; q < kMaxPeerRanks; ++q) {
                                  if (q < v.ranks) o[q * row_vectors] = x[q];
                                }
                              });
        break;
      }
    }
  }
#endif
};

}  // namespace baton::ops
