// The tiles of Baton's GEMM (kernels/gemm_body.cuh), rows x output features
// x the K columns of a pipeline stage, and the choice among them. Every tile
// gives the same bits (one accumulation order per element), so the op
// (ops/gemm.h) chooses from the launch's size alone. Plain C++: host and
// device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"

namespace baton {

enum class GemmTileShape : std::uint32_t { k128x256x64, k128x128x64, k64x128x64, k32x128x64 };
inline constexpr GemmTileShape kGemmTileShapes[] = {
    GemmTileShape::k128x256x64, GemmTileShape::k128x128x64, GemmTileShape::k64x128x64,
    GemmTileShape::k32x128x64};

}  // namespace baton

namespace baton::detail::decode {

// A block's tile: kM rows x kN output features, kK columns of K per stage,
// kStages stages, kWarpsM x kWarpsN warps, at least kMinBlocks resident per
// SM (__launch_bounds__).
template <int M, int N, int K, int Stages, int WarpsM, int WarpsN, int MinBlocks>
struct GemmTile {
  static constexpr int kM = M, kN = N, kK = K, kStages = Stages;
  static constexpr int kWarpsM = WarpsM, kWarpsN = WarpsN, kMinBlocks = MinBlocks;
  static constexpr int kThreads = WarpsM * WarpsN * 32;
  static constexpr int kWarpM = M / WarpsM, kWarpN = N / WarpsN;
  static constexpr int kMi = kWarpM / 16, kNi = kWarpN / 8;  // mma tiles per warp
  static constexpr int kChunks = K / 8;                      // 16-byte chunks per row
  static constexpr int kRowBytes = K * 2;
  static constexpr int kStageBytes = (M + N) * kRowBytes;
  static constexpr int kSharedBytes = Stages * kStageBytes;
  static_assert(kChunks == 4 || kChunks == 8, "the swizzle covers rows of 64 or 128 bytes");
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "ldmatrix.x4 loads 16 rows of A or B");
  static_assert(M * kChunks % kThreads == 0 && N * kChunks % kThreads == 0,
                "every thread copies the same number of chunks");
  static_assert(Stages >= 2, "a pipeline");

  // Blocks a launch over `rows` token rows (the capacity) needs.
  [[nodiscard]] BATON_HOST_DEVICE static constexpr unsigned row_tiles(std::uint32_t rows) {
    return (rows + M - 1) / M;
  }
  [[nodiscard]] BATON_HOST_DEVICE static constexpr unsigned feature_tiles(int out_features) {
    return static_cast<unsigned>((out_features + N - 1) / N);
  }
};

// The tiles ops::Gemm chooses from (GemmTileShape), 8 warps each, 64 K
// columns per stage (H100, bf16: 7-13% faster than 32-column stages of the
// same tile on the Llama-3.2-1B prefill shapes, with half the barriers per
// mma). A warp's 64 x 64 part of the 128 x 256 tile needs 8 ldmatrix.x4 per
// 32 mmas (the 64 x 32 parts of 128 x 128, 6 per 16; the 16 x 32 parts of
// 32 x 128, 3 per 4), so the large tiles feed the tensor cores best and the
// small ones trade that for blocks enough to fill the SMs on small grids.
using GemmTile128x256x64 = GemmTile<128, 256, 64, 3, 2, 4, 1>;
using GemmTile128x128x64 = GemmTile<128, 128, 64, 3, 2, 4, 2>;
using GemmTile64x128x64 = GemmTile<64, 128, 64, 4, 2, 4, 2>;
using GemmTile32x128x64 = GemmTile<32, 128, 64, 4, 2, 4, 2>;

template <GemmTileShape Shape>
struct GemmTileOf;
#define BATON_GEMM_TILE(M, N, K)                       \
  template <>                                          \
  struct GemmTileOf<GemmTileShape::k##M##x##N##x##K> { \
    using type = GemmTile##M##x##N##x##K;              \
  };
BATON_GEMM_TILE(128, 256, 64)
BATON_GEMM_TILE(128, 128, 64)
BATON_GEMM_TILE(64, 128, 64)
BATON_GEMM_TILE(32, 128, 64)
#undef BATON_GEMM_TILE

inline constexpr int kGemmThreads = 256;  // every tile's
// The most dynamic shared memory a tile takes (128 x 256 x 64: 3 stages of
// 48 KB).
inline constexpr int kGemmSharedBytes = GemmTile128x256x64::kSharedBytes;
static_assert(GemmTile128x128x64::kSharedBytes <= kGemmSharedBytes &&
              GemmTile64x128x64::kSharedBytes <= kGemmSharedBytes &&
              GemmTile32x128x64::kSharedBytes <= kGemmSharedBytes);

// SMs of an H100 SXM (132; an H200 has as many).
inline constexpr int kGemmSms = 132;

// The tile with the least estimated time: a grid that leaves every SM at
// most one block takes one block's time alone on an SM; otherwise it takes
// rounds of blocks_per_sm blocks on every SM. Both times were measured on an
// H100 (bf16, K = 2048; they scale alike with K), and the estimate picked the
// fastest of these tiles on each of the 12 Llama-3.2-1B prefill shapes at 128,
// 512 and 2048 rows. A function of the launch's shape alone; any choice
// gives the same bits.
[[nodiscard]] BATON_HOST_DEVICE constexpr GemmTileShape gemm_tile_shape(int out_features,
                                                                        std::uint32_t capacity) {
  struct Option {
    GemmTileShape shape;
    int m, n, blocks_per_sm;
    int alone_ns, round_ns;  // one block alone on an SM; a round of blocks_per_sm
  };
  constexpr Option kOptions[] = {{GemmTileShape::k128x256x64, 128, 256, 1, 47000, 55000},
                                 {GemmTileShape::k128x128x64, 128, 128, 2, 33000, 52000},
                                 {GemmTileShape::k64x128x64, 64, 128, 2, 18300, 28500},
                                 {GemmTileShape::k32x128x64, 32, 128, 2, 12800, 19200}};
  GemmTileShape best = kOptions[0].shape;
  long long best_cost = -1;
  for (const Option& o : kOptions) {
    const long long tiles =
        static_cast<long long>((capacity + o.m - 1) / o.m) * ((out_features + o.n - 1) / o.n);
    const long long slots = static_cast<long long>(kGemmSms) * o.blocks_per_sm;
    const long long cost =
        tiles <= kGemmSms ? o.alone_ns : (tiles + slots - 1) / slots * o.round_ns;
    if (best_cost < 0 || cost < best_cost) {
      best = o.shape;
      best_cost = cost;
    }
  }
  return best;
}

// The grid of a launch of tile G over `capacity` rows.
template <class G>
[[nodiscard]] BATON_HOST_DEVICE dim3 gemm_grid(int out_features, std::uint32_t capacity) {
  return dim3(G::row_tiles(capacity), G::feature_tiles(out_features));
}

}  // namespace baton::detail::decode
