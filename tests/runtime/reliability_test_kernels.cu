#include <cuda/atomic>

#include "reliability_test_kernels.h"

namespace baton::test {
namespace {

using SystemWord = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>;

__device__ unsigned long long timer_ns() {
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void stall_once(std::uint32_t* gate, unsigned long long stall_ns) {
  // One thread and one kernel at a time: a load and a store suffice (an
  // atomic read-modify-write on mapped host memory is not allowed over PCIe).
  SystemWord word(*gate);
  if (word.load(cuda::std::memory_order_acquire) != kGateArmed) return;
  word.store(kGateStarted, cuda::std::memory_order_release);
  const unsigned long long until = timer_ns() + stall_ns;
  while (timer_ns() < until) {
    __nanosleep(1000);
  }
  word.store(kGateFinished, cuda::std::memory_order_release);
}

__global__ void fault_once(std::uint32_t* gate, Fault fault, std::uint32_t* unmapped) {
  SystemWord word(*gate);
  if (word.load(cuda::std::memory_order_acquire) != kGateArmed) return;
  word.store(kGateStarted, cuda::std::memory_order_release);
  // "started" reaches the host before the fault happens, so a host that reads
  // "armed" after a fault report knows the report came before the fault.
  cuda::atomic_thread_fence(cuda::std::memory_order_seq_cst, cuda::thread_scope_system);
  if (fault == Fault::kTrap) __trap();
  *static_cast<volatile std::uint32_t*>(unmapped) = 0xdeadu;
}

}  // namespace

cudaError_t EnqueueStallOnce(std::uint32_t* gate, unsigned long long stall_ns,
                             cudaStream_t stream) {
  stall_once<<<1, 1, 0, stream>>>(gate, stall_ns);
  return cudaGetLastError();
}

cudaError_t EnqueueFaultOnce(std::uint32_t* gate, Fault fault, std::uint32_t* unmapped,
                             cudaStream_t stream) {
  fault_once<<<1, 1, 0, stream>>>(gate, fault, unmapped);
  return cudaGetLastError();
}

}  // namespace baton::test
