// Kernels for completion_mailbox_gpu_test behind a plain C++ interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/completion.h"
#include "baton/config.h"

namespace baton::test {

// The record the producer kernel publishes for id i.
[[nodiscard]] BATON_HOST_DEVICE constexpr Completion ExpectedCompletion(std::uint32_t id,
                                                                        std::uint32_t seed) {
  Completion c;
  c.id = id;
  c.status = static_cast<std::uint32_t>(CompletionStatus::kCompleted);
  c.steps = (id * 7u + seed) % 1000u;
  c.value = id ^ seed;
  return c;
}

// One thread publishes ids [0, total) in batches of 1..max_batch (chosen from
// the seed), retrying a refused batch up to max_retries times (sleeping between
// tries). results[0] = records published, results[1] = refusals seen,
// results[2] = 1 if it gave up.
[[nodiscard]] cudaError_t EnqueueProducer(MailboxView view, std::uint32_t total,
                                          std::uint32_t max_batch, std::uint32_t seed,
                                          std::uint32_t max_retries, std::uint32_t* results,
                                          cudaStream_t stream);

// One thread tries once to publish ids [first, first + count); *accepted = 1 or 0.
[[nodiscard]] cudaError_t EnqueueTryPushOnce(MailboxView view, std::uint32_t first,
                                             std::uint32_t count, std::uint32_t seed,
                                             std::uint32_t* accepted, cudaStream_t stream);

}  // namespace baton::test
