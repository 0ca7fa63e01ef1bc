// The decoder's weights on the GPU, in Baton's fused layouts, from a seed
// (the synthetic model) or from a Hugging Face checkpoint. Internal to the
// model.
//
// Layouts the step reads (row-major, [out_features, in_features]):
//   wqkv       q | k | v rows; within each head, RoPE pair i is rows 2i and
//              2i + 1 (the checkpoint's rotate-half rows i and i + head_dim / 2,
//              permuted once here: q·k and the attention output are unchanged)
//   qkv_bias   the same order (Qwen2)
//   w_gate_up  gate | up rows
//   lm_head    the embedding itself when the checkpoint ties them
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_config.h"
#include "checkpoint/checkpoint.h"
#include "plan/model_tensors.h"
#include "plan/tensor_parallel.h"

namespace baton::detail {

class ModelWeights {
 public:
  // The synthetic model of `config`, every element a function of the seed
  // (kernels/decoder_weights.h), drawn on the host's cores.
  // `progress` (may be empty): bytes uploaded and in all, after each tensor.
  // With tp.size > 1, only rank tp.rank's slices (plan/tensor_parallel.h),
  // each element the whole model's: the ranks' slices tile the model that
  // one GPU would hold. Validate tp first (ValidateTensorParallel).
  using Progress = std::function<void(std::uint64_t done, std::uint64_t total)>;
  [[nodiscard]] static absl::StatusOr<ModelWeights> Generate(const DecoderConfig& config,
                                                             std::uint64_t seed,
                                                             cudaStream_t stream,
                                                             const Progress& progress = {},
                                                             TensorParallel tp = {});
  // A validated checkpoint's tensors converted to config.dtype and fused
  // (with tp.size > 1, rank tp.rank's slices of them). `config` comes from
  // DecoderConfigFromCheckpoint.
  [[nodiscard]] static absl::StatusOr<ModelWeights> FromCheckpoint(
      const checkpoint::Checkpoint& checkpoint, const DecoderConfig& config, cudaStream_t stream,
      const Progress& progress = {}, TensorParallel tp = {});

  ModelWeights() = default;
  ModelWeights(ModelWeights&&) noexcept = default;
  ModelWeights& operator=(ModelWeights&&) noexcept = default;

  [[nodiscard]] const ModelTensors& tensors() const { return tensors_; }
  // Bytes one decode step reads (every weight once; the embedding only as a
  // tied LM head: a step reads one row of it per token otherwise); a
  // tensor-parallel rank's, its slices'.
  [[nodiscard]] std::size_t step_bytes() const { return step_bytes_; }

 private:
  DeviceBuffer<unsigned char> arena_;
  DeviceBuffer<float> rope_;
  ModelTensors tensors_;
  std::size_t step_bytes_ = 0;
};

}  // namespace baton::detail
