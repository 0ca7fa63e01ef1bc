// What one decode step does, as the runtime's engines run it: a StepProgram.
//
// The graph engines (tail-launch, conditional) capture `enqueue` once per
// batch-size bucket; the dynamic-parallelism engine launches the program's
// kernels from the device (`device_step`). Include baton/runtime.h to run a
// program; write its kernels with baton/step_kernel.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "baton/batch_policy.h"
#include "baton/page_policy.h"
#include "baton/step_args.h"

namespace baton {

// What a step program's enqueue function is told for each bucket it captures.
struct StepContext {
  // The graph serves steps of up to this many rows (tokens) and
  // min(bucket_size, args.max_batch) positions; without a token budget rows
  // and positions are the same.
  std::uint32_t bucket_size = 0;
  StepArgs args;  // device arrays the step's kernels read/write
};

// A step the dynamic-parallelism engine launches from device code. Device
// code can launch only kernels linked into its own device link, and a
// program may hold only one device link that uses the device runtime
// (docs/cuda-facts.md, D3), so a device step comes from a library that compiled
// Baton's dynamic-parallelism scheduler together with its step kernels
// (engines/dp_scheduler.cuh): the decoder model is one (DecoderModel::
// MakeStepProgram); launch_comparison's synthetic step, a benchmark fixture,
// is another.
struct DeviceStepProgram {
  // Launches the scheduler chain on `stream`: a one-warp kernel that decides
  // each step (the same decision as every engine), launches the step's
  // kernels into the tail-launch stream with grids sized for the actual
  // batch, then itself, until a decision ends the loop. `scheduler` is the
  // runtime's scheduler parameters (device memory), `params` the step's.
  using Launch = cudaError_t (*)(const void* scheduler, const void* params, cudaStream_t stream);
  Launch launch = nullptr;
  const void* params = nullptr;  // DEVICE pointer to the step's parameters
  // Largest RuntimeOptions::max_batch the params serve (e.g. per-slot state
  // sized for it); 0 means any.
  std::uint32_t max_batch = 0;
  // The option that sized them, named in the refusal when max_batch is too
  // small (e.g. "DecoderModelOptions::max_batch").
  const char* max_batch_option = nullptr;

  [[nodiscard]] bool is_valid() const { return launch != nullptr && params != nullptr; }
  [[nodiscard]] bool present() const { return launch != nullptr || params != nullptr; }
};

// What one decode step does. `enqueue` is captured once per bucket (and per
// engine): it must put the step's kernels on the given stream, sized for
// `bucket_size`, reading the live batch from ctx.args at run time, and call
// baton::finish_item for the items it completes. A step may run with
// header->batch == 0 (the graph engines empty the later steps of a
// multi-step graph when the next step belongs to another bucket): it must
// then do nothing. Kernels only (plus memcpy and memset); anything else is
// refused with a Status naming the node.
//
// A program with a device step may leave `enqueue` and `buckets` empty (it
// then runs on the dynamic-parallelism engine only) and may serve a
// max_batch above its largest bucket (the graph engines then refuse to start).
//
// A program whose per-item state is sized for some batch (the decoder
// model's KV cache) says so in `max_batch`, and the runtime takes the batch
// size from it. A program with a token budget (`tokens`) gets its items'
// inputs in chunks (baton/batch_policy.h): its buckets then count rows, and
// the largest must hold a whole step, max(max_batch, tokens.max_rows()).
struct StepProgram {
  std::string name = "step";
  std::vector<std::uint32_t> buckets;  // strictly increasing step sizes (rows)
  std::function<absl::Status(const StepContext&, cudaStream_t)> enqueue;
  DeviceStepProgram device_step;  // optional: for Engine::kDynamicParallelism
  // Items active at once (positions and slots); 0: RuntimeOptions::max_batch.
  std::uint32_t max_batch = 0;
  // How steps are filled: by default one token per active item per step.
  TokenPolicy tokens;
  // Paged per-token state (baton/page_policy.h): off by default. When on,
  // every item's payload carries its token bound in its high 32 bits, and
  // Submit refuses an item whose reserve exceeds the pool or a slot's row.
  PagePolicy pages;
};

}  // namespace baton
