// The shared-memory staging both tensor-core kernels use (gemm_body.cuh,
// chunk_attention_body.cuh): cp.async copies of 16 bytes from global to
// shared memory in commit groups, and ldmatrix loads of 8x8 b16 tiles.
#pragma once

namespace baton::detail {

// 16 bytes global -> shared address `shared`, or 16 zero bytes when !valid
// (`global` is then not read, but must still be a valid address).
__device__ __forceinline__ void cp_async_16(unsigned shared, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// p, as a value the compiler cannot take apart: constant offsets from it
// then stay immediates of the loads instead of each load's address being
// rebuilt from p's parts.
template <class P>
__device__ __forceinline__ P* opaque_pointer(P* p) {
  asm("mov.b64 %0, %0;" : "+l"(p));
  return p;
}
// Waits until at most N commit groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices from shared memory, one register of each per thread.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned shared) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared)
               : "memory");
}

// The same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned shared) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared)
               : "memory");
}

}  // namespace baton::detail
