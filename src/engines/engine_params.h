// The graph engines' scheduler parameters: the decision's (SchedulerParams),
// plus what only the engines use. Abseil-free.
//
// The one intended back-edge between layers lives here. A scheduler node is
// captured INTO the bucket graphs (tail-launch engine) or the loop bodies
// (conditional engine), but its parameters name those graphs (the bucket
// table of graph handles) and the conditional handles, which exist only once
// the graphs are built. So the node is captured with a POINTER to these
// parameters in device memory, and the engine writes them after building the
// graphs: graphs -> parameters by pointer, parameters -> graphs by value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "scheduler/scheduler_params.h"

namespace baton::detail {

// Where a conditional-engine scheduler node sits. With one bucket:
//   [kLoop] -> WHILE(continue) { step; kLoop }
// With several, the SWITCH is paid only when the bucket changes:
//   WHILE(continue) { kOuter; SWITCH(bucket) {
//     b: [step_b; kInner(b); WHILE(stay_b) { step_b; kInner(b) }] } }
enum class ConditionalRole : std::uint32_t { kLoop = 0, kOuter = 1, kInner = 2 };

struct GraphEngineParams {
  SchedulerParams scheduler;
  // The multi-step handshake's word (engines/carried_decision.h).
  std::uint32_t* carried = nullptr;  // device memory
  // Conditional engine only: the WHILE and SWITCH handles the scheduler sets,
  // and (several buckets) each bucket body's inner WHILE handle.
  cudaGraphConditionalHandle while_handle = 0;
  cudaGraphConditionalHandle switch_handle = 0;
  const cudaGraphConditionalHandle* stay_handles = nullptr;  // device [buckets.count]
};

}  // namespace baton::detail
