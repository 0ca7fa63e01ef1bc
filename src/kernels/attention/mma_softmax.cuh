// What both tensor-core attention bodies (chunk_attention_body.cuh,
// attention_split_mma_body.cuh) do to a score tile on its way into P · V:
// shared-memory addresses for cp.async/ldmatrix, exp2 without denormals,
// the online softmax's rescale, and P packed (or split as hi + lo) into mma
// operands. Internal; Abseil-free.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace baton::detail {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 2^x, flushing denormal results to 0 (weights below 2^-126 are lost in P's
// 16-bit rounding anyway): one MUFU.EX2, without exp2f's denormal handling.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A B operand of all ones (1.0 in both halves): P · ones gives P's row sums
// on the tensor cores, from the very values P · V multiplies.
template <class T>
inline constexpr unsigned kOnes = std::is_same_v<T, __half> ? 0x3C003C00u : 0x3F803F80u;

// Two fp32 values rounded to the storage type and packed as an mma operand
// (the lower column in the low half).
template <class T>
__device__ __forceinline__ unsigned pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  }
}

// Two fp32 values x as hi + lo, each packed in the storage type: hi = x
// rounded, lo = (x - hi) rounded (x - hi is exact in fp32). P = hi + lo
// carries about 16 significant bits, so P · V on the tensor cores costs no
// more than fp32 weights would: P rounded once to bf16 alone put single
// elements of short contexts at up to 1.07 of the tests' element bound
// (H100, 32/8 bf16, seed 2), hi + lo at 0.4 in a host model of the kernel's
// arithmetic. It costs two mmas for each one of P · V.
template <class T>
__device__ __forceinline__ void split(float x0, float x1, unsigned& hi, unsigned& lo) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(x0 - f.x, x1 - f.y);
    hi = *reinterpret_cast<const unsigned*>(&h);
    lo = *reinterpret_cast<const unsigned*>(&l);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    const float2 f = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - f.x, x1 - f.y);
    hi = *reinterpret_cast<const unsigned*>(&h);
    lo = *reinterpret_cast<const unsigned*>(&l);
  }
}

// One tile of scores into the online softmax of a warp's 16 query rows (both
// tensor-core attention bodies): lane holds rows a (lane / 4) and b (+ 8) of
// each n-tile's fragment, s[t][0..1] and s[t][2..3], and the rows' running
// maxima of the raw scores m_a, m_b (-inf before the first key). A row's
// maximum is its quad's (4 lanes hold a row); where any row's grew, O's
// n-tiles (those `has_tile(t)` admits) and the row sums are rescaled by
// exp2((old - new) * scale_log2) and the maxima advance. The first tile
// rescales zeros by exp2(-inf) = 0.
template <int N, int Tiles, class HasTile>
__device__ __forceinline__ void online_softmax_tile(const float (&s)[N][4], float& m_a, float& m_b,
                                                    float (&o)[Tiles][4], float (&sums)[4],
                                                    float scale_log2, HasTile&& has_tile) {
  float max_a = m_a, max_b = m_b;
#pragma unroll
  for (int t = 0; t < N; ++t) {
    max_a = fmaxf(max_a, fmaxf(s[t][0], s[t][1]));
    max_b = fmaxf(max_b, fmaxf(s[t][2], s[t][3]));
  }
  max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, 1));
  max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, 2));
  max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, 1));
  max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, 2));
  if (__all_sync(0xffffffffu, max_a == m_a && max_b == m_b)) return;
  const float rescale_a = fast_exp2((m_a - max_a) * scale_log2);
  const float rescale_b = fast_exp2((m_b - max_b) * scale_log2);
#pragma unroll
  for (int t = 0; t < Tiles; ++t) {
    if (has_tile(t)) {
      o[t][0] *= rescale_a;
      o[t][1] *= rescale_a;
      o[t][2] *= rescale_b;
      o[t][3] *= rescale_b;
    }
  }
  sums[0] *= rescale_a;
  sums[1] *= rescale_a;
  sums[2] *= rescale_b;
  sums[3] *= rescale_b;
  m_a = max_a;
  m_b = max_b;
}

}  // namespace baton::detail
