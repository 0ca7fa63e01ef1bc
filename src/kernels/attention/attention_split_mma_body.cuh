// The tensor-core split path of decode attention (kernels/attention/attention_body.cuh):
// a row whose context spans several units (kernels/attention/attention_split.h), for
// a model attention_split_mma accepts. Internal; Abseil-free.
//
// A block serves split z of key/value head kv_head of its row: units z,
// z + blocks, ... in order. The group's query heads are the rows of one
// mma's M (16; rows past the group are zeros), so each key and value is
// read once for all of them. K/V tiles of kAttentionMmaTileKeys keys stream
// through a ring in dynamic shared memory (cp.async, the cache rows of the
// first tiles issued before the wait on the previous node); each of the
// four warps takes 16 keys of every tile: S = Q·Kᵀ and O = P·V on
// mma.sync m16n8k16 with fp32 accumulation, an online softmax per warp in
// the log2 domain, P as hi + lo in the storage type (as the chunk
// attention, kernels/attention/chunk_attention_body.cuh). At a unit's end the warps'
// states are combined in warp order, and the units' partials in unit order
// by the last block of the row to finish: a row's bits depend on its q, its
// context and the model alone. Head dims 64 and 128 are compile-time (HD):
// their loops unroll exactly and a thread's cache copies are one base and
// constant strides, which took a warp's instructions at 8k keys from ~3,760
// to ~2,300 (the rest: the once-per-block prologue and the combine). The
// CUDA-core split path
// (attention_split_body.cuh) did the same work with scalar FMAs and ran at
// about 0.3 TB/s at 8k keys (H100, 2026-11-25: ~5,700 instructions per warp
// at ~10 cycles each, two warps per scheduler).
#pragma once

#include "kernels/async_copy.cuh"
#include "kernels/attention/attention_row.cuh"
#include "kernels/attention/mma_softmax.cuh"
#include "kernels/gemv_body.cuh"

namespace baton::detail::decode {

// The path's static shared memory (the ring and the warps' states are the
// kernel's dynamic shared memory, laid out by attention_mma_layout).
template <class T>
struct AttentionMmaShared {
  uint4 q[kAttentionMmaRows * kDecoderMaxHeadDim / 8];  // the group's q rows, swizzled chunks
  float sin[kDecoderMaxHeadDim / 2];  // RoPE at this token's position, per pair of dims
  float cos[kDecoderMaxHeadDim / 2];
  __align__(16) T fresh_k[kDecoderMaxHeadDim];  // this token's key and value, as the cache holds
  __align__(16) T fresh_v[kDecoderMaxHeadDim];  // them (block z = 0 appends them meanwhile)
  bool finishes;
};

// Where a tile of the block's sequence lies: its unit, its first key and the
// unit's end. The block walks its tiles in order (advance), with no
// division per tile.
struct MmaTileAt {
  int unit;
  int key0;
  int end;
};

// HD: the head_dim when known at compile time (64 and 128, the common
// ones: loops unrolled to it, no guards per chunk), or 0 for any multiple
// of 16 up to kDecoderMaxHeadDim read from the config. Inlined into the
// grouped head_dim-64 kernel, whose register cap (three blocks per SM) an
// out-of-line body compiled for the others' 255 could not meet; the other
// kernels call attention_split_mma_body below, out of line.
template <class T, bool Rope, int HD>
__device__ __forceinline__ void attention_split_mma_body_inline(
    const DecoderConfig& config, const float* inv_freq, T* qkv, const KvCacheLayer& cache,
    const DecodeBatch& batch, const AttentionRow& row, int kv_head, int z, int blocks,
    AttentionScratch scratch, AttentionMmaShared<T>& sh, char* dynamic, T* out) {
  static_assert(kAttentionMmaWarps == kAttentionWarps, "one warp per 16 keys of a tile");
  static_assert(HD == 0 || (HD % 16 == 0 && HD <= kDecoderMaxHeadDim), "a head_dim mma serves");
  constexpr int kTileKeys = kAttentionMmaTileKeys;
  constexpr int kHd = HD > 0 ? HD : kDecoderMaxHeadDim;  // what the unrolled loops cover
  const std::uint32_t p = row.index;
  const int group = config.group_size();
  const int hd = HD > 0 ? HD : config.head_dim;
  const int chunks = hd / 8;  // 16-byte chunks of a head row; also O's n-tiles
  const int ksteps = hd / 16;
  const auto has_chunk = [&](int t) { return HD > 0 || t < chunks; };
  const unsigned row_bytes = attention_mma_row_bytes(hd);
  const int stages = static_cast<int>(attention_mma_stages(hd));
  const unsigned stage_bytes = 2u * kTileKeys * row_bytes;
  const unsigned half = stage_bytes / 2;  // a stage's values follow its keys
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* const cache_keys = static_cast<T*>(cache.keys);
  T* const cache_values = static_cast<T*>(cache.values);

  const std::uint32_t slot = row.slot;
  const int pos = row.pos, context = row.pos + 1;
  // Rows [0, cached) come from the cache; with Rope, rows [hist, pos] are
  // this step's (this token's, computed here, and its chunk's, from qkv).
  const int cached = Rope ? row.hist : context;
  const AttentionSplit split = attention_split(context);
  const int unit_keys = split.tiles_per_unit * kAttentionTile;
  // This block's tiles, unit by unit (units z, z + blocks, ...): every unit
  // but the row's last has unit_keys / kTileKeys of them.
  const int my_units = (split.units - z + blocks - 1) / blocks;
  const int last_unit = z + (my_units - 1) * blocks;
  const int tiles = (my_units - 1) * (unit_keys / kTileKeys) +
                    (min(unit_keys, context - last_unit * unit_keys) + kTileKeys - 1) / kTileKeys;
  const auto unit_tile = [&](int u) {
    return MmaTileAt{u, u * unit_keys, min((u + 1) * unit_keys, context)};
  };
  const auto advance = [&](MmaTileAt& t) {
    t.key0 += kTileKeys;
    if (t.key0 >= t.end) t = unit_tile(t.unit + blocks);
  };

  // The cache offset of a tile's first row (t < cached, so its page is in
  // the table; an unmapped page reads page 0, in bounds, as kv_row does).
  // A tile lies in one page when pages hold a tile or more (the default):
  // its rows are then consecutive, one lookup per tile, loaded a tile ahead
  // of its copies; smaller pages are looked up per row.
  const KvRows kv_rows(config, cache, slot, kv_head, hd);
  const bool paged = kv_rows.paged();
  const bool tile_in_page =
      !paged || (1u << kv_rows.page_shift) >= static_cast<unsigned>(kTileKeys);
  const auto row_of = [&](int t) { return kv_rows.row(t); };
  // The page of a tile whose rows lie in one page (0 when it has no cached
  // row, or the cache is dense: then unused).
  const auto tile_page = [&](const MmaTileAt& t) -> std::uint32_t {
    return paged && tile_in_page && t.key0 < cached ? kv_rows.page_of(t.key0) : 0u;
  };
  const unsigned ring = shared_address(dynamic);
  // This thread's loads of a tile: rows r0, r0 + rows_step (+1 where the
  // chunk wraps), ..., chunk c0, ... (no division per load).
  const int r0 = threadIdx.x / chunks, c0 = threadIdx.x - r0 * chunks;
  const int rows_step = kAttentionThreads / chunks, chunk_step = kAttentionThreads % chunks;
  // The tile's cache rows, copied into ring stage `stage` (swizzled: chunk
  // c of row r at chunk c ^ (r % 8), so that ldmatrix's 8 rows of a chunk
  // hit 8 distinct bank groups).
  // With HD known and dividing the block's copies evenly, a thread copies
  // the same chunk of rows kCopyStep apart (a multiple of 8: the same
  // swizzle), so its copies are one base and constant strides.
  constexpr bool kFixedChunk = HD > 0 && kAttentionThreads % (HD > 0 ? HD / 8 : 1) == 0;
  constexpr int kCopyStep = kFixedChunk ? kAttentionThreads / (HD / 8) : 8;
  static_assert(kCopyStep % 8 == 0, "rows a thread copies share their swizzle");
  const unsigned copy_to = r0 * row_bytes + ((c0 ^ (r0 & 7)) << 4);
  const int copy_from = r0 * hd + c0 * 8;
  const auto issue_cache = [&](const MmaTileAt& t, std::uint32_t page, int stage) {
    const int rows = min(min(cached, t.end) - t.key0, kTileKeys);
    if (rows <= 0) return;
    const unsigned base = ring + stage * stage_bytes;
    const std::size_t tile_base =
        !paged ? kv_rows.row(t.key0) : (tile_in_page ? kv_rows.in_page(page, t.key0) : 0);
    if constexpr (kFixedChunk) {
      if (tile_in_page) {
        // The thread's first key and value, computed once: the copies are
        // then constant offsets from them. (Left to itself the compiler
        // rebuilt each copy's 64-bit address from the cache base, ~10
        // instructions a copy, 174 for a tile's 16: at batch 1 more than a
        // warp's mma work on the tile; ncu, 2026-11-28.)
        const T* const keys = opaque_pointer(cache_keys + tile_base + copy_from);
        const T* const values = opaque_pointer(cache_values + tile_base + copy_from);
        const unsigned to = base + copy_to;
        if (rows == kTileKeys) {  // every tile but a context's last: no guards
#pragma unroll
          for (int k = 0; k < kTileKeys / kCopyStep; ++k) {
            cp_async_16(to + k * kCopyStep * row_bytes, keys + k * kCopyStep * HD, true);
            cp_async_16(to + half + k * kCopyStep * row_bytes, values + k * kCopyStep * HD, true);
          }
          return;
        }
#pragma unroll
        for (int k = 0; k < kTileKeys / kCopyStep; ++k) {
          if (r0 + k * kCopyStep < rows) {
            cp_async_16(to + k * kCopyStep * row_bytes, keys + k * kCopyStep * HD, true);
            cp_async_16(to + half + k * kCopyStep * row_bytes, values + k * kCopyStep * HD, true);
          }
        }
        return;
      }
    }
    int r = r0, c = c0;
    while (r < rows) {
      const unsigned to = base + r * row_bytes + ((c ^ (r & 7)) << 4);
      const std::size_t from =
          (tile_in_page ? tile_base + static_cast<std::size_t>(r) * hd : row_of(t.key0 + r)) +
          c * 8;
      cp_async_16(to, cache_keys + from, true);
      cp_async_16(to + half, cache_values + from, true);
      r += rows_step;
      c += chunk_step;
      if (c >= chunks) {
        c -= chunks;
        ++r;
      }
    }
  };
  T* const qkv_row = qkv + static_cast<std::size_t>(p) * config.qkv_width();
  const int kv_offset = config.attention_width() + kv_head * hd;
  // The tile's other rows, stored directly: this token's, its chunk's
  // earlier ones (rotated as the cache will hold them), zeros past the
  // context (masked; zeros keep garbage such as NaN out of P·V).
  const auto store_fresh = [&](const MmaTileAt& at, int stage) {
    const int first = max(min(cached, at.end) - at.key0, 0);
    if (first >= kTileKeys) return;
    char* const base = dynamic + stage * stage_bytes;
    for (int n = first * chunks + threadIdx.x; n < kTileKeys * chunks; n += kAttentionThreads) {
      const int r = n / chunks, c = n - r * chunks;
      const int t = at.key0 + r;
      uint4 k{}, v{};
      if (Rope && t == pos) {
        k = *reinterpret_cast<const uint4*>(sh.fresh_k + c * 8);
        v = *reinterpret_cast<const uint4*>(sh.fresh_v + c * 8);
      } else if (Rope && t < pos) {
        const T* k_row =
            qkv_row - static_cast<std::ptrdiff_t>(pos - t) * config.qkv_width() + kv_offset;
        k = chunk_key_piece<T, kVector>(config, inv_freq, k_row, t, c * 8).bits;
        v = load_packed<T, kVector>(k_row + config.kv_width() + c * 8).bits;
      }
      const unsigned at_byte = r * row_bytes + ((c ^ (r & 7)) << 4);
      *reinterpret_cast<uint4*>(base + at_byte) = k;
      *reinterpret_cast<uint4*>(base + half + at_byte) = v;
    }
  };
  const auto wait_ring = [&] {  // the oldest tile in flight has landed
    if (stages == 3) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
  };

  // The first tiles' cache rows: before the wait when the batch is settled.
  // `ahead` is the next tile to issue, `ahead_page` its page (loaded while
  // the tile before it is copied and computed).
  MmaTileAt ahead = unit_tile(z);
  std::uint32_t ahead_page = tile_page(ahead);
  int issued = 0;
  const auto issue_next = [&](int stage) {
    const MmaTileAt t = ahead;
    const std::uint32_t page = ahead_page;
    if (++issued < tiles) {
      advance(ahead);
      ahead_page = tile_page(ahead);
    }
    issue_cache(t, page, stage);
    return t;
  };
  MmaTileAt first_tiles[2];  // the prologue's tiles (stages - 1 <= 2), for store_fresh
  for (int s = 0; s < stages - 1; ++s) {
    if (s < tiles) first_tiles[s] = issue_next(s);
    cp_async_commit();  // one group per tile, empty or not: uniform wait counts
  }
  if (batch.settled) enter_step_node(batch);
  if constexpr (Rope) {
    fill_angle_table(inv_freq, pos, hd, sh.sin, sh.cos);
    __syncthreads();  // the angle table
  }
  if constexpr (Rope) {
    for (int c = threadIdx.x; c < chunks; c += kAttentionThreads) {
      bool mapped = false;
      const std::size_t at = kv_row(config, cache, slot, kv_head, pos, mapped) + c * 8;
      rope_key_value_piece<T, kVector>(qkv_row + kv_offset, qkv_row + kv_offset + config.kv_width(),
                                       cache_keys, cache_values, at, c * 8,
                                       table_angles<kVector>(sh.sin, sh.cos, c * 8),
                                       z == 0 && mapped, sh.fresh_k + c * 8, sh.fresh_v + c * 8);
    }
  }
  // The group's q rows (rotated and rounded as stored), zeros past it.
  const int head0 = kv_head * group;
  const int row_chunks = static_cast<int>(row_bytes / 16);
  for (int n = threadIdx.x; n < kAttentionMmaRows * chunks; n += kAttentionThreads) {
    const int g = n / chunks, c = n - g * chunks;
    uint4 bits{};
    if (g < group) {
      const T* q_src = qkv_row + static_cast<std::size_t>(head0 + g) * hd;
      if constexpr (Rope) {
        float qf[kVector];
        rotated_piece<T, kVector>(q_src, c * 8, table_angles<kVector>(sh.sin, sh.cos, c * 8), qf);
        store_packed<T, kVector>(reinterpret_cast<T*>(&bits), qf);
      } else {
        bits = load_packed<T, kVector>(q_src + c * 8).bits;
      }
    }
    sh.q[g * row_chunks + (c ^ (g & 7))] = bits;
  }
  __syncthreads();  // this token's key and value
  for (int s = 0; s < stages - 1 && s < tiles; ++s) store_fresh(first_tiles[s], s);
  wait_ring();
  __syncthreads();  // q and tile 0

  const int quad = lane % 4, mrow = lane % 8, matrix = lane / 8;
  // Per-lane ldmatrix offsets (as the chunk attention's): Q's matrices rows
  // +0/+8 (matrix & 1), chunk 2kk + (matrix >> 1); K's n-tiles +0/+8 keys
  // (matrix >> 1), chunk 2kk + (matrix & 1); V's (transposed) keys +0/+8
  // (matrix & 1), chunk t + (matrix >> 1).
  const unsigned lane_q = (mrow + (matrix & 1) * 8) * row_bytes + (((matrix >> 1) ^ mrow) << 4);
  const unsigned lane_k = ((matrix >> 1) * 8 + mrow) * row_bytes + (((matrix & 1) ^ mrow) << 4);
  const unsigned lane_v = ((matrix & 1) * 8 + mrow) * row_bytes + (((matrix >> 1) ^ mrow) << 4);
  const unsigned q_base = shared_address(sh.q);
  unsigned qf[kHd / 16][4];
#pragma unroll
  for (int kk = 0; kk < kHd / 16; ++kk) {
    if (kk < ksteps) ldmatrix_x4(qf[kk], q_base + (lane_q ^ (kk << 5)));
  }
  const float scale_log2 = rsqrtf(static_cast<float>(hd)) * 1.4426950408889634f;
  // The warps' states: [warp][g][state_floats] (hd outputs, max, sum, two
  // floats of padding so that every row is 16-byte aligned), after the ring.
  const int state_floats = attention_mma_state_floats(hd);
  float* const states = reinterpret_cast<float*>(dynamic + stages * stage_bytes);
  T* const out_row = out + static_cast<std::size_t>(p) * config.attention_width() +
                     static_cast<std::size_t>(head0) * hd;
  const auto partial = [&](int g, int u) {
    return scratch.partials +
           ((static_cast<std::size_t>(p) * config.heads + head0 + g) * kAttentionMaxUnits + u) *
               (hd + 2);
  };

  float o[kHd / 8][4];
  float sums[4];   // P · ones: row a's sum in [0], row b's in [2]
  float m_a, m_b;  // running maxima of the raw scores (rows lane / 4 and + 8)
  const auto reset = [&] {
#pragma unroll
    for (int t = 0; t < kHd / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    sums[0] = sums[1] = sums[2] = sums[3] = 0.0f;
    m_a = m_b = -INFINITY;
  };
  reset();
  MmaTileAt at = first_tiles[0];  // tile j
  int read_stage = 0, write_stage = stages - 1;
  for (int j = 0;;) {
    // Refill the stage consumed in iteration j - 1 (every thread is past it).
    if (issued < tiles) store_fresh(issue_next(write_stage), write_stage);
    cp_async_commit();
    const int key0 = at.key0 + warp * 16;  // the warp's 16 keys
    if (key0 < at.end) {
      const unsigned k_at = ring + read_stage * stage_bytes + warp * 16 * row_bytes;
      float s[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < kHd / 16; ++kk) {
        if (kk < ksteps) {
          unsigned b[4];
          ldmatrix_x4(b, k_at + (lane_k ^ (kk << 5)));
          mma_16816<T>(s[0], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
          mma_16816<T>(s[1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
        }
      }
      if (key0 + 16 > at.end) {  // the row's last keys (warp-uniform)
#pragma unroll
        for (int t = 0; t < 2; ++t) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (key0 + t * 8 + quad * 2 + e >= at.end) s[t][e] = s[t][2 + e] = -INFINITY;
          }
        }
      }
      // The maxima are finite: key0 < end.
      online_softmax_tile(s, m_a, m_b, o, sums, scale_log2, has_chunk);
      const float shift_a = -m_a * scale_log2, shift_b = -m_b * scale_log2;
      unsigned hi[4], lo[4];  // A fragments: rows a, b of keys 0-7, then of keys 8-15
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        detail::split<T>(fast_exp2(fmaf(s[h][0], scale_log2, shift_a)),
                         fast_exp2(fmaf(s[h][1], scale_log2, shift_a)), hi[2 * h], lo[2 * h]);
        detail::split<T>(fast_exp2(fmaf(s[h][2], scale_log2, shift_b)),
                         fast_exp2(fmaf(s[h][3], scale_log2, shift_b)), hi[2 * h + 1],
                         lo[2 * h + 1]);
      }
      mma_16816<T>(sums, hi[0], hi[1], hi[2], hi[3], kOnes<T>, kOnes<T>);
      mma_16816<T>(sums, lo[0], lo[1], lo[2], lo[3], kOnes<T>, kOnes<T>);
      const unsigned v_at = k_at + half;
#pragma unroll
      for (int t = 0; t < kHd / 8; t += 2) {
        if (has_chunk(t)) {
          unsigned b[4];
          ldmatrix_x4_trans(b, v_at + (lane_v ^ (t << 4)));
          mma_16816<T>(o[t], hi[0], hi[1], hi[2], hi[3], b[0], b[1]);
          mma_16816<T>(o[t + 1], hi[0], hi[1], hi[2], hi[3], b[2], b[3]);
          mma_16816<T>(o[t], lo[0], lo[1], lo[2], lo[3], b[0], b[1]);
          mma_16816<T>(o[t + 1], lo[0], lo[1], lo[2], lo[3], b[2], b[3]);
        }
      }
    }
    if (at.key0 + kTileKeys >= at.end) {
      // The unit's last tile: the warps' states, then combined in warp
      // order (block-uniform; the states area is not the ring's).
      const int u = at.unit;
      const int ga = lane / 4, gb = ga + 8;
      float* const wa = states + (warp * group + ga) * state_floats;
      float* const wb = states + (warp * group + gb) * state_floats;
#pragma unroll
      for (int t = 0; t < kHd / 8; ++t) {
        if (has_chunk(t)) {
          if (ga < group) {
            wa[t * 8 + quad * 2] = o[t][0];
            wa[t * 8 + quad * 2 + 1] = o[t][1];
          }
          if (gb < group) {
            wb[t * 8 + quad * 2] = o[t][2];
            wb[t * 8 + quad * 2 + 1] = o[t][3];
          }
        }
      }
      if (quad == 0 && ga < group) {
        wa[hd] = m_a;
        wa[hd + 1] = sums[0];
      }
      if (quad == 0 && gb < group) {
        wb[hd] = m_b;
        wb[hd + 1] = sums[2];
      }
      __syncthreads();  // the warps' states
      // Four consecutive dims a thread (one pass for a group of 4 at
      // head_dim 128): the maximum and the warps' weights once for the four,
      // each dim summed over the warps in warp order as before (the same
      // bits). One dim a thread took 4 passes of ~90 instructions, the most
      // of any part of a warp's work at batch 1 (ncu, TP4 rank of the 8B
      // shape, 576 tokens).
      const int quarters = hd / 4;
      for (int i = threadIdx.x; i < group * quarters; i += kAttentionThreads) {
        const int g = i / quarters, d = (i - g * quarters) * 4;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kAttentionWarps; ++w)
          mx = fmaxf(mx, states[(w * group + g) * state_floats + hd]);
        float total[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kAttentionWarps; ++w) {
          const float* ws = states + (w * group + g) * state_floats;
          if (ws[hd] == -INFINITY) continue;  // a warp with no key in the unit
          const float f = fast_exp2((ws[hd] - mx) * scale_log2);
          const float4 v = *reinterpret_cast<const float4*>(ws + d);
          total[0] += f * v.x;
          total[1] += f * v.y;
          total[2] += f * v.z;
          total[3] += f * v.w;
          sum += f * ws[hd + 1];
        }
        if (split.units == 1) {
          float lo[2] = {total[0] / sum, total[1] / sum}, hi[2] = {total[2] / sum, total[3] / sum};
          store_packed<T, 2>(out_row + g * hd + d, lo);
          store_packed<T, 2>(out_row + g * hd + d + 2, hi);
        } else {
          float* const part = partial(g, u) + d;  // rows of hd + 2 floats: 8-byte aligned
          *reinterpret_cast<float2*>(part) = make_float2(total[0], total[1]);
          *reinterpret_cast<float2*>(part + 2) = make_float2(total[2], total[3]);
          if (d == 0) {
            part[hd] = mx * scale_log2;  // log2 domain
            part[hd + 1] = sum;
          }
        }
      }
      // (The next unit writes the states after the loop's next barrier.)
      reset();
    }
    if (++j == tiles) break;
    advance(at);
    read_stage = read_stage == stages - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == stages - 1 ? 0 : write_stage + 1;
    wait_ring();
    __syncthreads();  // tile j has landed, and every warp is done with tile j - 1
  }
  cp_async_wait<0>();  // only empty groups remain; leave none behind

  // The block that writes the output stores the group's q rotated (Rope):
  // sh.q holds it as rope_query_piece would store it (the same rotation
  // and rounding), so no load of q and no rotation at the block's end.
  const auto store_rotated_q = [&] {
    if constexpr (Rope) {
      for (int n = threadIdx.x; n < group * chunks; n += kAttentionThreads) {
        const int g = n / chunks, c = n - g * chunks;
        *reinterpret_cast<uint4*>(qkv_row + static_cast<std::size_t>(head0 + g) * hd + c * 8) =
            sh.q[g * row_chunks + (c ^ (g & 7))];
      }
    }
  };
  finish_split_row(
      config, scratch, p, kv_head, blocks, split, sh.finishes,
      [&] {
        // Each unit's weight per head, then the outputs: the ring is free now.
        float* const weights = reinterpret_cast<float*>(dynamic);  // [g][kAttentionMaxUnits]
        float* const sums_of = weights + group * kAttentionMaxUnits;
        float* const inverse = sums_of + group * kAttentionMaxUnits;
        const int units = split.units;
        for (int i = threadIdx.x; i < group * units; i += kAttentionThreads) {
          const int g = i / units, u = i - g * units;
          const float* part = partial(g, u);
          weights[g * kAttentionMaxUnits + u] = __ldcg(part + hd);
          sums_of[g * kAttentionMaxUnits + u] = __ldcg(part + hd + 1);
        }
        __syncthreads();
        for (int g = threadIdx.x; g < group; g += kAttentionThreads) {
          float* const w = weights + g * kAttentionMaxUnits;
          float mx = -INFINITY;
          for (int u = 0; u < units; ++u) mx = fmaxf(mx, w[u]);
          float sum = 0.0f;
          for (int u = 0; u < units; ++u) {
            w[u] = fast_exp2(w[u] - mx);
            sum += w[u] * sums_of[g * kAttentionMaxUnits + u];
          }
          inverse[g] = 1.0f / sum;
        }
        __syncthreads();
        // Four consecutive dims a thread, as the unit's combine above (each
        // dim's sum in unit order: the same bits).
        const int quarters = hd / 4;
        for (int i = threadIdx.x; i < group * quarters; i += kAttentionThreads) {
          const int g = i / quarters, d = (i - g * quarters) * 4;
          const float* const w = weights + g * kAttentionMaxUnits;
          float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          for (int u = 0; u < units; ++u) {
            const float* const part = partial(g, u) + d;
            const float2 a = __ldcg(reinterpret_cast<const float2*>(part));
            const float2 b = __ldcg(reinterpret_cast<const float2*>(part + 2));
            total[0] += w[u] * a.x;
            total[1] += w[u] * a.y;
            total[2] += w[u] * b.x;
            total[3] += w[u] * b.y;
          }
          const float inv = inverse[g];
          float lo[2] = {total[0] * inv, total[1] * inv}, hi[2] = {total[2] * inv, total[3] * inv};
          store_packed<T, 2>(out_row + g * hd + d, lo);
          store_packed<T, 2>(out_row + g * hd + d + 2, hi);
        }
      },
      store_rotated_q);
}

// The out-of-line body: the kernels that hold it beside the short path
// keep one copy per head dim.
template <class T, bool Rope, int HD>
__device__ __noinline__ void attention_split_mma_body(
    const DecoderConfig& config, const float* inv_freq, T* qkv, const KvCacheLayer& cache,
    const DecodeBatch& batch, const AttentionRow& row, int kv_head, int z, int blocks,
    AttentionScratch scratch, AttentionMmaShared<T>& sh, char* dynamic, T* out) {
  attention_split_mma_body_inline<T, Rope, HD>(config, inv_freq, qkv, cache, batch, row, kv_head, z,
                                               blocks, scratch, sh, dynamic, out);
}

}  // namespace baton::detail::decode
