// The split path of decode attention (kernels/attention/attention_body.cuh): a row
// whose context spans several units (kernels/attention/attention_split.h), served by
// blocks per (row, key/value head) that each read their units' keys and
// values once for all the query heads of the group. Internal; Abseil-free.
//
// Inside a unit the four warps work alone, with no block barrier until the
// unit ends: each owns a quarter of every block tile (tiles of 4 warps x
// rounds x keys per round, round-major, so that a short context spreads over
// all the warps), scores its keys for the pass's query heads (a key's dims
// split over lanes_per_key lanes, 16 each), keeps its own online softmax,
// and accumulates the values (a value row split over piece_lanes lanes, V
// elements each). A warp tile's key and value loads are all issued at once,
// the first tile's before the wait on the previous node. At the unit's end
// the warps' softmax states are combined in warp order, the units' in unit
// order by the last block to finish: a row's bits depend on its q, its
// context and the head size alone.
#pragma once

#include "kernels/attention/attention_row.cuh"

namespace baton::detail::decode {

inline constexpr int kAttentionSliceDims = 16;  // dims of a key one lane scores
inline constexpr int kAttentionLoads = 8;       // key loads, and value loads, per lane per tile

__host__ __device__ constexpr int attention_pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// How a warp's tile of keys lies on its lanes: a function of head_dim and V
// alone (so of the model), never of the launch.
template <int V>
struct AttentionWarpLayout {
  static constexpr int kSliceLoads = kAttentionSliceDims / V;  // loads of one lane's key slice
  static constexpr int kMaxRounds = kAttentionLoads / kSliceLoads;
  // Value pieces a lane may hold: 2 only for V = 2 past 32 pieces (a
  // head_dim over 64 that 8 does not divide).
  static constexpr int kPieceSlots = V == 2 ? 2 : 1;
  int pieces;          // V-element loads per row
  int slots;           // value pieces per lane: 2 past 32 pieces, else 1
  int lanes_per_key;   // a power of 2: ceil(head_dim / 16) rounded up
  int keys_per_round;  // 32 / lanes_per_key
  int round_shift;     // log2(keys_per_round): keys are placed with shifts, not divisions
  int rounds;          // keys a lane scores per tile (a power of 2, <= kMaxRounds)
  int keys;            // per warp tile: rounds * keys_per_round (<= 32)
  int piece_lanes;     // lanes sharing a value row: a power of 2 >= pieces, at most 32
  int key_subs;        // value rows a warp reads at once: 32 / piece_lanes
  int value_steps;     // value rows per lane per tile: keys / key_subs

  __device__ explicit AttentionWarpLayout(int head_dim) {
    pieces = head_dim / V;
    slots = pieces > 32 ? 2 : 1;
    lanes_per_key =
        attention_pow2_at_least((head_dim + kAttentionSliceDims - 1) / kAttentionSliceDims);
    keys_per_round = 32 / lanes_per_key;
    round_shift = 0;
    while ((1 << round_shift) < keys_per_round) ++round_shift;
    piece_lanes = pieces > 32 ? 32 : attention_pow2_at_least(pieces);
    key_subs = 32 / piece_lanes;
    // As many rounds as keep a lane's value loads within kAttentionLoads
    // (rounds * piece_lanes * slots / lanes_per_key of them), a warp tile
    // within 32 keys and the key loads within kAttentionLoads.
    const int by_values = kAttentionLoads * lanes_per_key / (piece_lanes * slots);
    rounds = by_values < 1 ? 1 : by_values;
    if (rounds > lanes_per_key) rounds = lanes_per_key;
    if (rounds > kMaxRounds) rounds = kMaxRounds;
    keys = rounds * keys_per_round;
    value_steps = keys / key_subs;
  }
  // Keys per block tile (all warps): divides kAttentionTile.
  __device__ int block_keys() const { return kAttentionWarps * keys; }
  // Value load j of a lane: its step (value row) and whether it is the
  // lane's second piece (piece0 + 32).
  __device__ int value_step(int j) const {
    return kPieceSlots == 2 && slots == 2 ? j % (kAttentionLoads / 2) : j;
  }
  __device__ bool second_piece(int j) const {
    return kPieceSlots == 2 && slots == 2 && j >= kAttentionLoads / 2;
  }
  // Key kt (0 <= kt < keys) of warp w's share of the block tile at base.
  __device__ int key(int base, int w, int kt) const {
    return base + ((kt >> round_shift) << round_shift) * kAttentionWarps + (w << round_shift) +
           (kt & (keys_per_round - 1));
  }
};

// What a split block keeps in shared memory (about 26 KB for H = 8 and
// head_dim 128).
template <class T, int V, int H>
struct AttentionSplitShared {
  float q[H][kDecoderMaxHeadDim];  // the pass's query heads, as stored (rounded)
  // RoPE's sin and cos at this token's position, per pair of dims: computed
  // once (one inlined sincosf is a few hundred instructions of code).
  float sin[kDecoderMaxHeadDim / 2];
  float cos[kDecoderMaxHeadDim / 2];
  // This token's key and value (row pos): the block computes them itself,
  // never reading back a row that block z = 0 is appending.
  __align__(16) T fresh_k[kDecoderMaxHeadDim];
  __align__(16) T fresh_v[kDecoderMaxHeadDim];
  float p[kAttentionWarps][32][H];                    // a warp tile's softmax weights, per key
  float acc[kAttentionWarps][H][kDecoderMaxHeadDim];  // the warps' unit outputs
  float m[kAttentionWarps][H];
  float l[kAttentionWarps][H];
  bool finishes;
};

// The split path of attention_body (contract there) for a row whose context
// spans several units: this block is split z of the `blocks` serving key/
// value head kv_head of the row (z < split.units). Issues the first tile's
// loads, waits for the previous node if the batch is settled (the caller
// waited otherwise), then serves units z, z + blocks, ...; the last block
// to finish combines them.
template <class T, int V, int H, bool Rope>
__device__ __noinline__ void attention_split_body(
    const DecoderConfig& config, const float* inv_freq, T* qkv, const KvCacheLayer& cache,
    const DecodeBatch& batch, const AttentionRow& row, int kv_head, int z, int blocks,
    AttentionScratch scratch, AttentionSplitShared<T, V, H>& sh, T* out) {
  using Layout = AttentionWarpLayout<V>;
  constexpr int kSliceLoads = Layout::kSliceLoads;
  constexpr int kMaxRounds = Layout::kMaxRounds;
  constexpr int kSlots = Layout::kPieceSlots;
  const std::uint32_t p = row.index;
  const int group_size = config.group_size();
  const int hd = config.head_dim;
  const Layout lay(hd);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slice = lane % lay.lanes_per_key;  // the lane's key dims: [16 slice, 16 slice + 16)
  const int key_in_round = lane / lay.lanes_per_key;
  const int piece0 = lane % lay.piece_lanes;  // the lane's value pieces: piece0 (+ 32)
  const int key_sub = lane / lay.piece_lanes;
  T* const cache_keys = static_cast<T*>(cache.keys);
  T* const cache_values = static_cast<T*>(cache.values);

  const std::uint32_t slot = row.slot;
  const int pos = row.pos, hist = row.hist;
  const AttentionSplit split = attention_split(pos + 1);
  // Row t's offset in the cache (t < pos, so its page is in the table).
  const KvRows kv_rows(config, cache, slot, kv_head, hd);
  const auto row_of = [&](int t) { return kv_rows.row(t); };
  const auto unit_end = [&](int u) {
    const int end = (u + 1) * split.tiles_per_unit * kAttentionTile;
    return end < pos + 1 ? end : pos + 1;
  };
  // The cache rows of the warp's share of the block tile at `base` below
  // `limit` (rows before hist, inside the unit: final before this kernel
  // starts); zeros elsewhere.
  Packed<T, V> key_rows[kAttentionLoads], value_rows[kAttentionLoads];
  const auto load_tile = [&](int base, int limit) {
#pragma unroll
    for (int r = 0; r < kMaxRounds; ++r) {
      const int t = lay.key(base, warp, r * lay.keys_per_round + key_in_round);
#pragma unroll
      for (int i = 0; i < kSliceLoads; ++i) key_rows[r * kSliceLoads + i] = zero_packed<T, V>();
      if (r >= lay.rounds || lay.key(base, warp, r * lay.keys_per_round) >= limit) continue;
      const bool row_ok = t < limit;
      const T* row = row_ok ? cache_keys + row_of(t) : cache_keys;
#pragma unroll
      for (int i = 0; i < kSliceLoads; ++i) {
        const int d = slice * kAttentionSliceDims + i * V;
        if (row_ok && d < hd) key_rows[r * kSliceLoads + i] = load_packed<T, V>(row + d);
      }
    }
#pragma unroll
    for (int j = 0; j < kAttentionLoads; ++j) {
      const int step = lay.value_step(j), piece = piece0 + (lay.second_piece(j) ? 32 : 0);
      const int t = lay.key(base, warp, step * lay.key_subs + key_sub);
      value_rows[j] = zero_packed<T, V>();
      if (step >= lay.value_steps || lay.key(base, warp, step * lay.key_subs) >= limit) continue;
      if (piece < lay.pieces && t < limit) {
        value_rows[j] = load_packed<T, V>(cache_values + row_of(t) + piece * V);
      }
    }
  };
  // The first tile's cache rows: before the wait when the batch is settled,
  // off the critical path.
  {
    const int end = unit_end(z);
    load_tile(z * split.tiles_per_unit * kAttentionTile, hist < end ? hist : end);
  }
  if (batch.settled) enter_step_node(batch);
  T* const out_row = out + static_cast<std::size_t>(p) * config.attention_width() +
                     static_cast<std::size_t>(kv_head) * group_size * hd;
  T* const qkv_row = qkv + static_cast<std::size_t>(p) * config.qkv_width();
  const int kv_offset = config.attention_width() + kv_head * hd;
  // Row t of this row's chunk before it: its k and v in qkv.
  const auto chunk_row = [&](int t) {
    return qkv_row - static_cast<std::ptrdiff_t>(pos - t) * config.qkv_width() + kv_offset;
  };
  if constexpr (Rope) {
    fill_angle_table(inv_freq, pos, hd, sh.sin, sh.cos);
    __syncthreads();  // the angle table
  }
  // RoPE's rotation of dims [d, d + V) at this token's position.
  // This token's key and value, as the cache holds them.
  for (int i = threadIdx.x; i < lay.pieces; i += kAttentionThreads) {
    bool mapped = false;
    const std::size_t row = kv_row(config, cache, slot, kv_head, pos, mapped) + i * V;
    if constexpr (Rope) {
      rope_key_value_piece<T, V>(qkv_row + kv_offset, qkv_row + kv_offset + config.kv_width(),
                                 cache_keys, cache_values, row, i * V,
                                 table_angles<V>(sh.sin, sh.cos, i * V), z == 0 && mapped,
                                 sh.fresh_k + i * V, sh.fresh_v + i * V);
    } else {
      *reinterpret_cast<typename Bits<V>::type*>(sh.fresh_k + i * V) =
          load_packed<T, V>(cache_keys + row).bits;
      *reinterpret_cast<typename Bits<V>::type*>(sh.fresh_v + i * V) =
          load_packed<T, V>(cache_values + row).bits;
    }
  }
  // The rows of the tile at `base` past the cache's (limit) and inside the
  // unit: this token's (computed above) and its chunk's earlier rows (qkv).
  const auto fill_extra = [&](int base, int limit, int end) {
#pragma unroll
    for (int r = 0; r < kMaxRounds; ++r) {
      const int t = lay.key(base, warp, r * lay.keys_per_round + key_in_round);
      if (r < lay.rounds && t >= limit && t < end) {
#pragma unroll
        for (int i = 0; i < kSliceLoads; ++i) {
          const int d = slice * kAttentionSliceDims + i * V;
          if (d < hd) {
            key_rows[r * kSliceLoads + i] =
                t == pos ? load_packed<T, V>(sh.fresh_k + d)
                         : chunk_key_piece<T, V>(config, inv_freq, chunk_row(t), t, d);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kAttentionLoads; ++j) {
      const int step = lay.value_step(j), piece = piece0 + (lay.second_piece(j) ? 32 : 0);
      const int t = lay.key(base, warp, step * lay.key_subs + key_sub);
      if (step < lay.value_steps && piece < lay.pieces && t >= limit && t < end) {
        value_rows[j] = t == pos ? load_packed<T, V>(sh.fresh_v + piece * V)
                                 : load_packed<T, V>(chunk_row(t) + config.kv_width() + piece * V);
      }
    }
  };
  const float scale = rsqrtf(static_cast<float>(hd));
  // The first tile of unit z in the first pass is loaded.
  bool first_unit = true;

  for (int h0 = 0; h0 < group_size; h0 += H) {
    const int heads = group_size - h0 < H ? group_size - h0 : H;
    const int head0 = kv_head * group_size + h0;
    __syncthreads();  // the previous pass no longer reads q
    // (Heads past the group's are zero: their scores are 0, never stored.)
    for (int i = threadIdx.x; i < H * lay.pieces; i += kAttentionThreads) {
      const int g = i / lay.pieces, d = (i % lay.pieces) * V;
      const T* q_src = qkv_row + static_cast<std::size_t>(head0 + g) * hd;
      float qf[V] = {};
      if (g < heads) {
        if constexpr (Rope) {
          rotated_piece<T, V>(q_src, d, table_angles<V>(sh.sin, sh.cos, d), qf);
#pragma unroll
          for (int e = 0; e < V; ++e) qf[e] = Storage<T>::load(Storage<T>::store(qf[e]));
        } else {
          const auto qv = load_packed<T, V>(q_src + d);
#pragma unroll
          for (int e = 0; e < V; ++e) qf[e] = qv[e];
        }
      }
#pragma unroll
      for (int e = 0; e < V; ++e) sh.q[g][d + e] = qf[e];
    }
    __syncthreads();  // q, this token's k and v

    for (int u = z; u < split.units; u += blocks) {
      const int begin = u * split.tiles_per_unit * kAttentionTile, end = unit_end(u);
      const int limit = hist < end ? hist : end;  // rows read from the cache
      float m_run[H], l_run[H], acc[kSlots][H][V];
#pragma unroll
      for (int g = 0; g < H; ++g) {
        m_run[g] = -INFINITY;
        l_run[g] = 0.0f;
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
#pragma unroll
          for (int e = 0; e < V; ++e) acc[s][g][e] = 0.0f;
        }
      }
      for (int base = begin; base < end; base += lay.block_keys()) {
        // (Warps with no key in the tile run it too, all weights 0: the
        // loop stays uniform for the shuffles.)
        if (!first_unit || base != begin) load_tile(base, limit);
        if (base + lay.block_keys() > limit) fill_extra(base, limit, end);
        // Scores: lane (key_in_round, slice) dots its 16 dims of round r's
        // key with each head's q; the key's lanes sum their parts (a
        // butterfly: every lane of the key gets the same bits).
        float score[kMaxRounds][H];
#pragma unroll
        for (int r = 0; r < kMaxRounds; ++r) {
          const int t = lay.key(base, warp, r * lay.keys_per_round + key_in_round);
          // Warp-uniform: the round's keys are contiguous; a short context
          // skips the rounds past it.
          const bool round_live =
              r < lay.rounds && lay.key(base, warp, r * lay.keys_per_round) < end;
#pragma unroll
          for (int g = 0; g < H; ++g) score[r][g] = -INFINITY;
          float dot[H] = {};
          if (round_live) {
#pragma unroll
            for (int i = 0; i < kSliceLoads; ++i) {
              const int d = slice * kAttentionSliceDims + i * V;
              if (d < hd) {
#pragma unroll
                for (int g = 0; g < H; ++g) {
#pragma unroll
                  for (int e = 0; e < V; ++e) {
                    dot[g] += sh.q[g][d + e] * key_rows[r * kSliceLoads + i][e];
                  }
                }
              }
            }
          }
          // (Outside the branch: shuffles where every lane provably runs.)
          for (int o = 1; o < lay.lanes_per_key; o *= 2) {
#pragma unroll
            for (int g = 0; g < H; ++g) dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], o);
          }
#pragma unroll
          for (int g = 0; g < H; ++g) {
            if (round_live && t < end) score[r][g] = dot[g] * scale;
          }
        }
        // The warp tile's max per head, the running max, the weights.
        __syncwarp();  // the previous tile's weights are read
#pragma unroll
        for (int g = 0; g < H; ++g) {
          float mx = score[0][g];
#pragma unroll
          for (int r = 1; r < kMaxRounds; ++r) mx = fmaxf(mx, score[r][g]);
#pragma unroll
          for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
          const float next = fmaxf(m_run[g], mx);  // -inf while the warp has had no key
          const float rescale = next == -INFINITY ? 1.0f : __expf(m_run[g] - next);
          m_run[g] = next;
          l_run[g] *= rescale;
#pragma unroll
          for (int s = 0; s < kSlots; ++s) {
#pragma unroll
            for (int e = 0; e < V; ++e) acc[s][g][e] *= rescale;
          }
#pragma unroll
          for (int r = 0; r < kMaxRounds; ++r) {
            if (r < lay.rounds && slice == 0) {
              sh.p[warp][r * lay.keys_per_round + key_in_round][g] =
                  score[r][g] == -INFINITY ? 0.0f : __expf(score[r][g] - next);
            }
          }
        }
        __syncwarp();  // the weights, for the warp
                       // Values: lane (key_sub, piece) takes value rows key_sub,
                       // key_sub + key_subs, ... of the warp tile (rows past the unit and
                       // pieces past the head are zeros with weight 0).
#pragma unroll
        for (int j = 0; j < kAttentionLoads; ++j) {
          const bool second = lay.second_piece(j);
          const int step = lay.value_step(j);
          // Warp-uniform, as the rounds: a step's rows lie in one round.
          const bool valid =
              step < lay.value_steps && lay.key(base, warp, step * lay.key_subs) < end;
          if (!valid) continue;
          const int kt = step * lay.key_subs + key_sub;
          float w[H];
#pragma unroll
          for (int g = 0; g < H; ++g) w[g] = sh.p[warp][kt][g];
          if (!second && piece0 == 0) {
#pragma unroll
            for (int g = 0; g < H; ++g) l_run[g] += w[g];
          }
#pragma unroll
          for (int g = 0; g < H; ++g) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
              // (Constant indices both ways: acc stays in registers.)
              if (second) {
                acc[kSlots - 1][g][e] += w[g] * value_rows[j][e];
              } else {
                acc[0][g][e] += w[g] * value_rows[j][e];
              }
            }
          }
        }
      }
      // The warp's unit state: sums over its key_subs and lanes (butterflies),
      // then the warps' states combined in warp order.
#pragma unroll
      for (int g = 0; g < H; ++g) {
        for (int o = lay.piece_lanes; o < 32; o *= 2) {
#pragma unroll
          for (int s = 0; s < kSlots; ++s) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
              acc[s][g][e] += __shfl_xor_sync(0xffffffffu, acc[s][g][e], o);
            }
          }
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) l_run[g] += __shfl_xor_sync(0xffffffffu, l_run[g], o);
        if (key_sub == 0) {
#pragma unroll
          for (int s = 0; s < kSlots; ++s) {
            const int piece = piece0 + 32 * s;
            if (piece < lay.pieces) {
#pragma unroll
              for (int e = 0; e < V; ++e) sh.acc[warp][g][piece * V + e] = acc[s][g][e];
            }
          }
        }
        if (lane == 0) {
          sh.m[warp][g] = m_run[g];
          sh.l[warp][g] = l_run[g];
        }
      }
      __syncthreads();  // the warps' states
      for (int i = threadIdx.x; i < heads * hd; i += kAttentionThreads) {
        const int g = i / hd, d = i % hd;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kAttentionWarps; ++w) mx = fmaxf(mx, sh.m[w][g]);
        float total = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kAttentionWarps; ++w) {
          if (sh.m[w][g] == -INFINITY) continue;  // a warp with no key in the unit
          const float f = __expf(sh.m[w][g] - mx);
          total += f * sh.acc[w][g][d];
          sum += f * sh.l[w][g];
        }
        if (split.units == 1) {
          store(out_row + (h0 + g) * hd, d, total / sum);
        } else {
          float* part =
              scratch.partials +
              ((static_cast<std::size_t>(p) * config.heads + head0 + g) * kAttentionMaxUnits + u) *
                  (hd + 2);
          part[d] = total;
          if (d == 0) {
            part[hd] = mx;
            part[hd + 1] = sum;
          }
        }
      }
      __syncthreads();  // the warps' states serve the next unit
      first_unit = false;
    }
  }
  // The block that writes the output rotates q in place (Rope).
  const auto store_rotated_q = [&] {
    if constexpr (Rope)
      rope_group_queries<T, V>(qkv_row + static_cast<std::size_t>(kv_head) * group_size * hd,
                               group_size, hd, sh.sin, sh.cos);
  };
  finish_split_row(
      config, scratch, p, kv_head, blocks, split, sh.finishes,
      [&] {
        for (int i = threadIdx.x; i < group_size * hd; i += kAttentionThreads) {
          const int h = i / hd, d = i % hd;
          const float* part = scratch.partials + (static_cast<std::size_t>(p) * config.heads +
                                                  kv_head * group_size + h) *
                                                     kAttentionMaxUnits * (hd + 2);
          float mx = -INFINITY;
          for (int u = 0; u < split.units; ++u) mx = fmaxf(mx, __ldcg(part + u * (hd + 2) + hd));
          float total = 0.0f, sum = 0.0f;
          for (int u = 0; u < split.units; ++u) {
            const float* unit = part + u * (hd + 2);
            const float w = __expf(__ldcg(unit + hd) - mx);
            total += w * __ldcg(unit + d);
            sum += w * __ldcg(unit + hd + 1);
          }
          store(out_row + h * hd, d, total / sum);
        }
      },
      store_rotated_q);
}

}  // namespace baton::detail::decode
