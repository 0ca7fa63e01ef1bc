// A checkpoint's config.json spec as the DecoderConfig Baton's kernels run,
// with what the kernels cannot run refused first (before any GPU work),
// naming the file, the field, the value and what is supported. Internal to
// the model; pure, CPU-testable.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "baton/decoder_config.h"
#include "checkpoint/model_spec.h"

namespace baton::detail {

// `source` is config.json's path. `max_context`: tokens one sequence may hold
// (0: the smaller of max_position_embeddings and kDecoderMaxContext).
// `dtype`: the weights' and activations' type (default: the checkpoint's
// fp16/bf16; float32 checkpoints convert to bf16), `checkpoint_dtype` the
// type the tensors are stored in.
[[nodiscard]] absl::StatusOr<DecoderConfig> DecoderConfigFromCheckpoint(
    const checkpoint::ModelSpec& spec, checkpoint::DType checkpoint_dtype,
    const std::string& source, int max_context, std::optional<DecoderDType> dtype);

}  // namespace baton::detail
