#include "batch_ops_test_kernels.h"
#include "scheduler/batch_ops.cuh"
#include "scheduler/page_ops.cuh"

namespace baton::test {
namespace {

// The start of a round: the step finishes the flagged positions, then the
// decision loads its first round and collects what retired.
__device__ std::uint32_t finish_and_collect(const StepArgs& args, const detail::BatchBook& book,
                                            const std::uint8_t* finish, std::uint32_t batch,
                                            detail::FirstRound& first) {
  for (std::uint32_t p = threadIdx.x; p < batch; p += 32) {
    if (finish[p]) finish_item(args, p, TestResult(p, args.items[p].id));
  }
  __syncwarp();
  first = detail::load_first_round(args);
  return detail::warp_collect_retired(args, book, batch, first);
}

__global__ void batch_round(StepArgs args, detail::BatchBook book, const std::uint8_t* finish,
                            const WorkItem* offers, std::uint32_t offer_count, TokenPolicy policy,
                            bool hinted, std::uint32_t* retired_count, std::uint32_t* rows) {
  std::uint32_t batch = book.counts->batch;
  detail::FirstRound first;
  const std::uint32_t retired = finish_and_collect(args, book, finish, batch, first);
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

__global__ void paged_batch_round(StepArgs args, detail::BatchBook book, PagePolicy pages,
                                  const std::uint8_t* finish, const WorkItem* offers,
                                  std::uint32_t offer_count, TokenPolicy policy,
                                  std::uint32_t* retired_count, std::uint32_t* rows,
                                  std::uint32_t* consumed) {
  std::uint32_t batch = book.counts->batch;
  detail::FirstRound first;
  const std::uint32_t retired = finish_and_collect(args, book, finish, batch, first);
  if (retired > 0) {
    detail::warp_release_pages(pages, args, book, batch);
    batch = detail::warp_compact(args, book, batch);
  } else {
    detail::warp_advance(args, batch, first);
  }
  std::uint32_t held = book.counts->held;
  batch = detail::warp_admit_held(pages, args, book, batch, held);
  std::uint32_t taken = 0;
  bool holding = held != 0;
  for (std::uint32_t base = 0; base < offer_count && !holding; base += 32) {
    const std::uint32_t i = base + threadIdx.x;
    const bool valid = i < offer_count;
    batch = detail::warp_offer_popped(pages, args, book, batch, valid ? offers[i] : WorkItem{},
                                      valid, holding);
    taken += __popc(__ballot_sync(detail::kFullWarp, valid));
  }
  const std::uint32_t planned = detail::warp_plan_tokens(policy, args, batch, detail::PlanLane{});
  detail::warp_map_pages(pages, args, book, batch);
  if (threadIdx.x == 0) {
    *retired_count = retired;
    *rows = planned;
    *consumed = taken;
  }
}

}  // namespace

cudaError_t EnqueuePagedBatchRound(StepArgs args, detail::BatchBook book, PagePolicy pages,
                                   const std::uint8_t* finish, const WorkItem* offers,
                                   std::uint32_t offer_count, TokenPolicy policy,
                                   std::uint32_t* retired_count, std::uint32_t* rows,
                                   std::uint32_t* consumed, cudaStream_t stream) {
  paged_batch_round<<<1, 32, 0, stream>>>(args, book, pages, finish, offers, offer_count, policy,
                                          retired_count, rows, consumed);
  return cudaGetLastError();
}

cudaError_t EnqueueBatchRound(StepArgs args, detail::BatchBook book, const std::uint8_t* finish,
                              const WorkItem* offers, std::uint32_t offer_count, TokenPolicy policy,
                              bool hinted, std::uint32_t* retired_count, std::uint32_t* rows,
                              cudaStream_t stream) {
  batch_round<<<1, 32, 0, stream>>>(args, book, finish, offers, offer_count, policy, hinted,
                                    retired_count, rows);
  return cudaGetLastError();
}

}  // namespace baton::test
