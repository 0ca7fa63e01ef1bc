// Baton's wide GEMV (kernels/wide_gemv_body.cuh): the decode projections of
// buckets of 9 to 64 positions, each weight read from memory once whatever
// the bucket. y[p] = W · x[p] (+ bias) for the live positions, x plain
// (io.x), fp32 accumulation, with ops::Gemv's three outputs exactly as it
// defines them (kStore, kResidualAdd, kSiluMul).
//
// Batch invariant across its own launches: y[p] is bit-identical whatever
// the capacity, *active or p (the K split is a function of the shape). Not
// bit-identical to ops::Gemv, whose warps split K another way: the decoder
// runs it only where tokens already depend on the bucket (DecoderGemm::kAuto
// above auto_gemv_max_bucket). Position tiles of 16, 32 or 64, the smallest
// that holds the bucket (a larger bucket takes several tiles of 64, each
// reading the weights again); clusters of (1, 1, split) along K. Graph path
// only: its clusters would compile 144 device-launch instantiations for a
// plan the device step never runs. Refused: in_features % 8 != 0, sizes < 1,
// W or x null or not 16-byte aligned, y / residual null, a bias not 2-byte
// aligned (or any with kSiluMul), an odd kSiluMul width, a null
// batch.active.
#pragma once

#include <cstdint>

#include "kernels/gemv_io.h"
#include "kernels/gemv_shape.h"
#include "ops/op.h"
#include "ops/projection.h"
#if defined(__CUDACC__)
#include "kernels/wide_gemv_body.cuh"
#endif

namespace baton::ops {

// The most positions one block of the wide GEMV owns.
inline constexpr std::uint32_t kWideGemvMaxBucket = 64;

struct WideGemv : GraphOnlyOp {
  static constexpr const char* kName = "wide_gemv";
  struct Args : ProjectionArgs<WideGemv> {};

  static Args of(DecoderDType dtype, GemvOutput output, const void* w, int out_features,
                 int in_features, const GemvIo& io, DecodeBatch batch) {
    return {{dtype, output, w, out_features, in_features, io, batch}};
  }

  // The blocks that split K for a weight of this shape and output (a
  // function of the shape alone: the bits depend on it).
  BATON_HOST_DEVICE static int split(GemvOutput output, int out_features, int in_features) {
    using namespace detail::decode;
    return wide_gemv_split(wide_row_blocks(output, out_features), in_features);
  }

  static cudaError_t check(const Args& a) {
    const bool known = a.output == GemvOutput::kStore || a.output == GemvOutput::kResidualAdd ||
                       a.output == GemvOutput::kSiluMul;
    const bool ok = known && projection_ok(a, /*w_present=*/true) && a.io.x != nullptr &&
                    aligned16(a.io.x) &&
                    detail::decode::gemv_output_ok(a.output, a.io, a.out_features);
    return ok ? cudaSuccess : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  // NT: position tiles of 8 a block owns (2, 4 or 8); two blocks per SM, the
  // split's target grid (wide_gemv_split) being one wave of them.
  template <class T, GemvOutput Out, int NT>
  struct Variant
      : ClusteredBlock<T, detail::decode::kWideThreads, 2, detail::decode::kWideMaxSplit, 2> {
    static constexpr GemvOutput kOutput = Out;
    static constexpr int kTiles = NT;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    using namespace detail::decode;
    const unsigned row_blocks = static_cast<unsigned>(wide_row_blocks(a.output, a.out_features));
    const unsigned k_split = static_cast<unsigned>(split(a.output, a.out_features, a.in_features));
    const auto with_tiles = [&](auto variant) {
      using V = decltype(variant);
      const unsigned positions = V::kTiles * kMmaPositions;
      return f(variant, LaunchShape{dim3(row_blocks, (a.batch.capacity + positions - 1) / positions,
                                         k_split),
                                    dim3(kWideThreads), dim3(1, 1, k_split),
                                    static_cast<unsigned>(sizeof(WideGemvShared<V::kTiles>))});
    };
    const auto with_output = [&](auto t, auto out) {
      using T = decltype(t);
      constexpr GemvOutput O = decltype(out)::value;
      if (a.batch.capacity <= 2 * kMmaPositions) return with_tiles(Variant<T, O, 2>{});
      if (a.batch.capacity <= 4 * kMmaPositions) return with_tiles(Variant<T, O, 4>{});
      return with_tiles(Variant<T, O, 8>{});
    };
    return with_dtype(a.dtype, [&](auto t) {
      switch (a.output) {
        case GemvOutput::kStore:
          return with_output(t, std::integral_constant<GemvOutput, GemvOutput::kStore>{});
        case GemvOutput::kResidualAdd:
          return with_output(t, std::integral_constant<GemvOutput, GemvOutput::kResidualAdd>{});
        case GemvOutput::kSiluMul:
          return with_output(t, std::integral_constant<GemvOutput, GemvOutput::kSiluMul>{});
      }
      return cudaErrorInvalidValue;
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    detail::decode::wide_gemv_body<T, V::kOutput, V::kTiles>(
        static_cast<const T*>(a.w), a.out_features, a.in_features, a.io, a.batch, tile,
        shared_as<detail::decode::WideGemvShared<V::kTiles>>(shared));
  }
#endif
};

}  // namespace baton::ops
