// Kernels for batch_ops_gpu_test behind a plain C++ interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/batch_policy.h"
#include "baton/page_policy.h"
#include "baton/step_args.h"
#include "scheduler/batch_book.h"

namespace baton::test {

// The result value the test's "step" reports for a finished item.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t TestResult(std::uint32_t position,
                                                                   std::uint32_t id) {
  return position * 7u + id;
}

// One scheduler round on one warp: finish the positions flagged in `finish`
// (as a step would, with TestResult), collect the retired items, compact or
// (nothing finished) advance, admit `offers`, then plan the next step's
// tokens under `policy`. With `hinted` the plan is given each lane's input
// and tokens so far in registers, as the scheduler's decision gives them
// when it knows them (detail::PlanLane), else it loads them.
// *retired_count = completions collected, *rows = the plan's rows.
[[nodiscard]] cudaError_t EnqueueBatchRound(StepArgs args, detail::BatchBook book,
                                            const std::uint8_t* finish, const WorkItem* offers,
                                            std::uint32_t offer_count, TokenPolicy policy,
                                            bool hinted, std::uint32_t* retired_count,
                                            std::uint32_t* rows, cudaStream_t stream);

// The same round for a paged program (baton/page_policy.h), as the
// decision runs it: retire (releasing pages) and compact or advance, admit
// the held items, then offer `offers` a warp's claim at a time while nothing
// is held (*consumed = offers taken, the rest stay queued), plan the tokens
// (registers unknown) and map the step's pages.
[[nodiscard]] cudaError_t EnqueuePagedBatchRound(StepArgs args, detail::BatchBook book,
                                                 PagePolicy pages, const std::uint8_t* finish,
                                                 const WorkItem* offers, std::uint32_t offer_count,
                                                 TokenPolicy policy, std::uint32_t* retired_count,
                                                 std::uint32_t* rows, std::uint32_t* consumed,
                                                 cudaStream_t stream);

}  // namespace baton::test
