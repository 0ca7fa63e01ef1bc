#include "batch_ops_test_kernels.h"
#include "scheduler/batch_ops.cuh"

namespace baton::test {
namespace {

__global__ void batch_round(StepArgs args, detail::BatchBook book, const std::uint8_t* finish,
                            const WorkItem* offers, std::uint32_t offer_count, TokenPolicy policy,
                            bool hinted, std::uint32_t* retired_count, std::uint32_t* rows) {
  std::uint32_t batch = book.counts->batch;
  for (std::uint32_t p = threadIdx.x; p < batch; p += 32) {
    if (finish[p]) finish_item(args, p, TestResult(p, args.items[p].id));
  }
  __syncwarp();
  const detail::FirstRound first = detail::load_first_round(args);
  const std::uint32_t retired = detail::warp_collect_retired(args, book, batch, first);
  if (retired > 0) {
    batch = detail::warp_compact(args, book, batch);
  } else {
    detail::warp_advance(args, batch, first);
  }
  for (std::uint32_t base = 0; base < offer_count; base += 32) {
    const std::uint32_t i = base + threadIdx.x;
    const bool valid = i < offer_count;
    batch = detail::warp_admit(args, book, batch, valid ? offers[i] : WorkItem{}, valid);
  }
  detail::PlanLane hint;
  if (hinted && batch <= 32) {  // what the decision would know in registers
    hint.known = true;
    if (threadIdx.x < batch) {
      hint.input = InputTokens(args.items[threadIdx.x]);
      hint.ran = args.item_tokens[threadIdx.x];
    }
  }
  const std::uint32_t planned = detail::warp_plan_tokens(policy, args, batch, hint);
  if (threadIdx.x == 0) {
    *retired_count = retired;
    *rows = planned;
  }
}

}  // namespace

cudaError_t EnqueueBatchRound(StepArgs args, detail::BatchBook book, const std::uint8_t* finish,
                              const WorkItem* offers, std::uint32_t offer_count, TokenPolicy policy,
                              bool hinted, std::uint32_t* retired_count, std::uint32_t* rows,
                              cudaStream_t stream) {
  batch_round<<<1, 32, 0, stream>>>(args, book, finish, offers, offer_count, policy, hinted,
                                    retired_count, rows);
  return cudaGetLastError();
}

}  // namespace baton::test
