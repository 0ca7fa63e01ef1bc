#include "carried_decision.h"

namespace baton::detail {

absl::StatusOr<CarriedDecision> CarriedDecision::Create() {
  CarriedDecision decision;
  BATON_ASSIGN_OR_RETURN(decision.word_, DeviceBuffer<std::uint32_t>::Create(1));
  BATON_RETURN_IF_ERROR(decision.Reset());
  return decision;
}

absl::Status CarriedDecision::Reset() {
  if (word_.size() == 0) return absl::OkStatus();  // never created: nothing carried
  const std::uint32_t zero = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(word_.data(), &zero, sizeof(zero), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

}  // namespace baton::detail
