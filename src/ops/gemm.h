// Baton's tensor-core GEMM (kernels/gemm_body.cuh): the projections of a
// step that holds many token rows (a prefill chunk), where ops::Gemv's
// 8-position tiles would read every weight once per 8 rows.
//
// y[r] = W · x[r] (+ bias) for the live rows r < *batch.active of
// batch.capacity. W [out_features, in_features] row-major (a PyTorch Linear
// weight), x [capacity, in_features], y [capacity, out_features], in the
// dtype; fp32 accumulation. kStore: y = round(W·x + bias); kResidualAdd:
// residual[r][o] += round_to_dtype(W·x + bias) (residual fp32 [capacity,
// out_features]), exactly ops::Gemv's outputs; plain inputs only.
//
// Row invariant: y[r] is bit-identical whatever the capacity, *active, the
// other rows and the tile (kernels/gemm_tiles.h), so the tile is chosen from
// the launch's size (gemm_tile_shape) unless Args::fixed_tile names one; a
// device launch compiles one tile (the device step's link stays small).
// Rows >= *active are neither read nor written. DecodeBatch::settled and
// launch_next_early as for the decode ops (x and the residual are read after
// the wait in any case).
//
// Refused, before any launch: in_features % 8 != 0, sizes < 1 (capacity 0
// included), W, x, y or residual null or not 16-byte aligned, a bias not
// 2-byte aligned, a null batch.active, or a grid past CUDA's limits.
#pragma once

#include <cstdint>

#include "kernels/gemm_tiles.h"
#include "kernels/gemv_io.h"
#include "ops/op.h"
#include "ops/projection.h"
#if defined(__CUDACC__)
#include "kernels/gemm_body.cuh"
#endif

namespace baton::ops {

struct Gemm : KernelOp {
  static constexpr const char* kName = "gemm";
  struct Args : ProjectionArgs<Gemm> {  // io: x, y or residual, bias
    bool fixed_tile = false;            // launch `tile` rather than the launch size's choice
    GemmTileShape tile = GemmTileShape::k128x128x64;
  };
  // The device launches' tile (any tile gives the same bits).
  static constexpr GemmTileShape kDeviceTile = GemmTileShape::k64x128x64;

  static Args of(DecoderDType dtype, GemvOutput output, const void* w, int out_features,
                 int in_features, const GemvIo& io, DecodeBatch batch) {
    return {{dtype, output, w, out_features, in_features, io, batch}};
  }
  static Args tiled(GemmTileShape tile, DecoderDType dtype, GemvOutput output, const void* w,
                    int out_features, int in_features, const GemvIo& io, DecodeBatch batch) {
    return {{dtype, output, w, out_features, in_features, io, batch}, true, tile};
  }
  // The tile a launch of `capacity` rows of `out_features` outputs takes.
  BATON_HOST_DEVICE static GemmTileShape tile_for(int out_features, std::uint32_t capacity) {
    return detail::decode::gemm_tile_shape(out_features, capacity);
  }

  static cudaError_t check(const Args& a) {
    const auto present = [](const void* p) { return p != nullptr && aligned16(p); };
    const bool ok = (a.dtype == DecoderDType::kFloat16 || a.dtype == DecoderDType::kBFloat16) &&
                    (a.output == GemvOutput::kStore || a.output == GemvOutput::kResidualAdd) &&
                    projection_ok(a, /*w_present=*/true) && a.batch.capacity != 0 &&
                    present(a.io.x) &&
                    present(a.output == GemvOutput::kStore ? a.io.y : a.io.residual) &&
                    reinterpret_cast<std::uintptr_t>(a.io.bias) % 2 == 0 &&
                    // gridDim.y (feature tiles of the narrowest tile, 128) and int row indexing.
                    (a.out_features + 127) / 128 <= 65535 && a.batch.capacity <= 0x7FFFFFFFu - 256;
    return ok ? cudaSuccess : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  template <class T, GemvOutput Out, class G>
  struct Variant : Block<T, G::kThreads, G::kMinBlocks> {
    using GemmTile = G;
    static constexpr GemvOutput kOutput = Out;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    using namespace detail::decode;
    const auto launch = [&](auto variant) {
      using G = typename decltype(variant)::GemmTile;
      return f(variant,
               LaunchShape{gemm_grid<G>(a.out_features, a.batch.capacity), dim3(G::kThreads),
                           dim3(1, 1, 1), static_cast<unsigned>(G::kSharedBytes)});
    };
    const auto with_tile = [&](auto t, auto out, GemmTileShape tile) {
      using T = decltype(t);
      constexpr GemvOutput O = decltype(out)::value;
      if constexpr (Launch::kFromDevice) {
        return launch(Variant<T, O, typename GemmTileOf<kDeviceTile>::type>{});
      } else {
        switch (tile) {
          case GemmTileShape::k128x256x64:
            return launch(Variant<T, O, GemmTile128x256x64>{});
          case GemmTileShape::k128x128x64:
            return launch(Variant<T, O, GemmTile128x128x64>{});
          case GemmTileShape::k64x128x64:
            return launch(Variant<T, O, GemmTile64x128x64>{});
          case GemmTileShape::k32x128x64:
            return launch(Variant<T, O, GemmTile32x128x64>{});
        }
        return cudaErrorInvalidValue;
      }
    };
    const GemmTileShape tile = a.fixed_tile ? a.tile : tile_for(a.out_features, a.batch.capacity);
    return with_dtype(a.dtype, [&](auto t) {
      return a.output == GemvOutput::kStore
                 ? with_tile(t, std::integral_constant<GemvOutput, GemvOutput::kStore>{}, tile)
                 : with_tile(t, std::integral_constant<GemvOutput, GemvOutput::kResidualAdd>{},
                             tile);
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    detail::decode::gemm_body<T, V::kOutput, typename V::GemmTile>(
        static_cast<const T*>(a.w), a.out_features, a.in_features, a.io, a.batch, tile,
        static_cast<char*>(shared));
  }
#endif
};

}  // namespace baton::ops
