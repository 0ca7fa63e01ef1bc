// The multi-step handshake of the graph engines, host half (the device half
// is engines/carried_decision.cuh; both engines' kernels use it, in
// graph_engine_kernels.cu).
//
// A bucket graph (tail-launch engine) or loop body (conditional engine) holds
// n steps with an inner scheduler node between them, so one launch or one
// WHILE evaluation serves n steps while the batch stays in the bucket. An
// inner node that decides a step in ANOTHER bucket cannot let the next step
// run it (that step was captured for its own bucket): it empties the next
// step (header->batch = 0, so its kernels return at once) and CARRIES the
// decision in a device word. Later inner nodes see the word and leave their
// steps empty; the node that ends the graph or body acts on it (tail-launches
// that bucket's graph, or leaves the bucket's loop so the outer SWITCH picks
// it), restoring the batch from the scheduler's book and clearing the word.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/cuda_resources.h"

namespace baton::detail {

class CarriedDecision {
 public:
  [[nodiscard]] static absl::StatusOr<CarriedDecision> Create();
  [[nodiscard]] std::uint32_t* device_word() const { return word_.data(); }
  // No decision carried (after Abort ended the loop between two steps).
  [[nodiscard]] absl::Status Reset();

 private:
  DeviceBuffer<std::uint32_t> word_;
};

}  // namespace baton::detail
