#include "batch_ops_test_kernels.h"
#include "scheduler/batch_ops.cuh"

namespace baton::test {
namespace {

__global__ void batch_round(StepArgs args, detail::BatchBook book, const std::uint8_t* finish,
                            const WorkItem* offers, std::uint32_t offer_count,
                            std::uint32_t* retired_count) {
  std::uint32_t batch = book.counts->batch;
  for (std::uint32_t p = threadIdx.x; p < batch; p += 32) {
    if (finish[p]) finish_item(args, p, TestResult(p, args.items[p].id));
  }
  __syncwarp();
  const std::uint32_t retired =
      detail::warp_collect_retired(args, book, batch, detail::load_first_round(args));
  batch = detail::warp_compact(args, book, batch);
  for (std::uint32_t base = 0; base < offer_count; base += 32) {
    const std::uint32_t i = base + threadIdx.x;
    const bool valid = i < offer_count;
    batch = detail::warp_admit(args, book, batch, valid ? offers[i] : WorkItem{}, valid);
  }
  if (threadIdx.x == 0) *retired_count = retired;
}

}  // namespace

cudaError_t EnqueueBatchRound(StepArgs args, detail::BatchBook book, const std::uint8_t* finish,
                              const WorkItem* offers, std::uint32_t offer_count,
                              std::uint32_t* retired_count, cudaStream_t stream) {
  batch_round<<<1, 32, 0, stream>>>(args, book, finish, offers, offer_count, retired_count);
  return cudaGetLastError();
}

}  // namespace baton::test
