#include "completion/completion_mailbox.cuh"
#include "mailbox_test_kernels.h"

namespace baton::test {
namespace {

constexpr std::uint32_t kMaxBatch = 64;

__global__ void producer(MailboxView view, std::uint32_t total, std::uint32_t max_batch,
                         std::uint32_t seed, std::uint32_t max_retries, std::uint32_t* results) {
  Completion batch[kMaxBatch];
  std::uint32_t next = 0, refusals = 0, state = seed | 1u;
  while (next < total) {
    state = state * 1664525u + 1013904223u;
    std::uint32_t count = 1 + (state >> 8) % max_batch;
    if (count > total - next) count = total - next;
    for (std::uint32_t i = 0; i < count; ++i) batch[i] = ExpectedCompletion(next + i, seed);
    std::uint32_t tries = 0;
    while (!mailbox_try_push(view, batch, count)) {
      ++refusals;
      if (++tries > max_retries) {
        results[0] = next;
        results[1] = refusals;
        results[2] = 1;
        return;
      }
      __nanosleep(1000);
    }
    next += count;
  }
  results[0] = next;
  results[1] = refusals;
  results[2] = 0;
}

__global__ void try_push_once(MailboxView view, std::uint32_t first, std::uint32_t count,
                              std::uint32_t seed, std::uint32_t* accepted) {
  Completion batch[kMaxBatch];
  for (std::uint32_t i = 0; i < count; ++i) batch[i] = ExpectedCompletion(first + i, seed);
  *accepted = mailbox_try_push(view, batch, count) ? 1 : 0;
}

}  // namespace

cudaError_t EnqueueProducer(MailboxView view, std::uint32_t total, std::uint32_t max_batch,
                            std::uint32_t seed, std::uint32_t max_retries, std::uint32_t* results,
                            cudaStream_t stream) {
  if (max_batch == 0 || max_batch > kMaxBatch) return cudaErrorInvalidValue;
  producer<<<1, 1, 0, stream>>>(view, total, max_batch, seed, max_retries, results);
  return cudaGetLastError();
}

cudaError_t EnqueueTryPushOnce(MailboxView view, std::uint32_t first, std::uint32_t count,
                               std::uint32_t seed, std::uint32_t* accepted, cudaStream_t stream) {
  if (count == 0 || count > kMaxBatch) return cudaErrorInvalidValue;
  try_push_once<<<1, 1, 0, stream>>>(view, first, count, seed, accepted);
  return cudaGetLastError();
}

}  // namespace baton::test
