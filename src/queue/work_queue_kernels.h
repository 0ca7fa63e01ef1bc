// Host-launched helper kernels of the work queue (initialize, seed, drain),
// behind a plain C++ interface: src/queue/work_queue.cc wraps them in Status.
// Internal to the runtime; no Abseil.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/work_item.h"

namespace baton::queue_kernels {

// Empties the ring so that the next ticket is `first_ticket`: every slot's
// sequence number, head = tail = first_ticket, items = 0, free_slots =
// capacity, closed = 0, error word = 0.
[[nodiscard]] cudaError_t EnqueueInitialize(const WorkQueueView& view,
                                            unsigned long long first_ticket, cudaStream_t stream);

// Pushes staged[0, count) in order with one block of 256 threads (so it can
// co-run with a consumer grid that leaves a block slot free) and writes how many were accepted to
// *accepted: always a prefix of `staged`; it stops at the first moment the queue has no free slot.
[[nodiscard]] cudaError_t EnqueueSeed(const WorkQueueView& view, const WorkItem* staged,
                                      std::uint64_t count, std::uint64_t* accepted,
                                      cudaStream_t stream);

// Pops until the queue reports no item, at most out_capacity items, into
// out[0, *drained) in ticket order, with one thread block.
[[nodiscard]] cudaError_t EnqueueDrain(const WorkQueueView& view, WorkItem* out,
                                       std::uint64_t out_capacity, std::uint64_t* drained,
                                       cudaStream_t stream);

// Loads the queue's kernels now. With lazy module loading (CUDA's default), a
// kernel's first launch may wait for kernels already running; a first Seed
// next to consumers that spin until the queue is closed would then not start
// until they gave up (our host-seeding test on an H200 stalled exactly this
// way until the kernels were preloaded).
[[nodiscard]] cudaError_t PreloadKernels();

}  // namespace baton::queue_kernels
