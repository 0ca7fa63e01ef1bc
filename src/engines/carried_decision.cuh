// The multi-step handshake of the graph engines, device half: see
// engines/carried_decision.h for the protocol. Called by the leader lane of
// a scheduler node. Abseil-free.
#pragma once

#include <cstdint>

#include "engines/engine_params.h"

namespace baton::detail {

// Whether an earlier inner node of this graph or body carried a decision.
[[nodiscard]] __device__ inline bool decision_carried(const GraphEngineParams& p) {
  return *p.carried != 0;
}

// An inner node decided something its graph's next step must not run: empty
// that step; a decision for another bucket is carried to the last node (an
// exit decision is not: the last node decides again and reaches it anew).
__device__ inline void empty_next_step(const GraphEngineParams& p, bool carry) {
  p.scheduler.args.header->batch = 0;
  p.scheduler.args.header->tokens = 0;
  if (carry) *p.carried = 1;
}

// The carried decision, taken by the node that acts on it: the header's batch
// and rows (emptied by the inner node) are restored from the scheduler's
// book. Returns the decided step's bucket.
__device__ inline std::uint32_t take_carried_decision(const GraphEngineParams& p) {
  *p.carried = 0;
  StepHeader& header = *p.scheduler.args.header;
  header.batch = p.scheduler.book.counts->batch;
  header.tokens = p.scheduler.book.counts->rows;
  return header.bucket;
}

}  // namespace baton::detail
