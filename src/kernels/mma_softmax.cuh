// What both tensor-core attention bodies (chunk_attention_body.cuh,
// attention_split_mma_body.cuh) do to a score tile on its way into P · V:
// shared-memory addresses for cp.async/ldmatrix, exp2 without denormals,
// and P packed (or split as hi + lo) into mma operands. Internal;
// Abseil-free.
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

}  // namespace baton::detail
