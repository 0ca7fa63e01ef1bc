// cuBLASLt linear layers for step graphs: Y = act(X · Wᵀ + bias), row-major,
// with the algorithm chosen once and an explicit workspace, so a capture holds
// only kernel nodes and certifies for device launch (docs/cuda-facts.md, G8:
// without a workspace cuBLAS may add allocation nodes, which are not
// device-launchable).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/cuda_resources.h"

namespace baton {

enum class MatmulEpilogue { kNone, kBias, kBiasRelu, kBiasGelu };
enum class MatmulDataType { kFloat32, kFloat16, kBFloat16 };  // compute is always FP32

[[nodiscard]] std::string MatmulEpilogueName(MatmulEpilogue epilogue);
[[nodiscard]] std::size_t MatmulElementBytes(MatmulDataType type);

// A cuBLASLt handle plus the workspace every plan made from it uses. Plans
// enqueued on one stream run in order, so they may share it; plans that run
// concurrently need separate contexts.
class CublasLtContext {
 public:
  // 4 MiB is what cuBLASLt's Hopper heuristics ask for at decode sizes.
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{4} << 20;

  [[nodiscard]] static absl::StatusOr<std::shared_ptr<CublasLtContext>> Create(
      std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CublasLtContext();
  CublasLtContext(const CublasLtContext&) = delete;
  CublasLtContext& operator=(const CublasLtContext&) = delete;

  [[nodiscard]] cublasLtHandle_t handle() const { return handle_; }
  [[nodiscard]] void* workspace() const { return workspace_.data(); }
  [[nodiscard]] std::size_t workspace_bytes() const { return workspace_.size(); }

 private:
  CublasLtContext() = default;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
};

struct LinearOptions {
  int tokens = 0;        // rows of X and Y
  int in_features = 0;   // columns of X and W
  int out_features = 0;  // rows of W, columns of Y, length of bias
  MatmulDataType data_type = MatmulDataType::kFloat16;
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
};

// OK when every size is >= 1 and the leading dimensions keep 16-byte rows
// (cuBLASLt's fast paths; pure, CPU-testable).
[[nodiscard]] absl::Status ValidateLinearOptions(const LinearOptions& options);

// One linear layer: descriptors, layouts and the heuristic's algorithm chosen
// once at creation. Enqueue only launches, so it is safe inside a capture.
class CublasLtLinear {
 public:
  [[nodiscard]] static absl::StatusOr<CublasLtLinear> Create(
      std::shared_ptr<const CublasLtContext> context, const LinearOptions& options);
  CublasLtLinear(CublasLtLinear&&) noexcept;
  CublasLtLinear& operator=(CublasLtLinear&&) noexcept;
  ~CublasLtLinear();

  // y[tokens, out] = act(x[tokens, in] · w[out, in]ᵀ + bias[out]), row-major.
  // `bias` is required for the bias epilogues and ignored otherwise. Pointers
  // must be 16-byte aligned. Not thread-safe (the bias pointer lives in the
  // plan's descriptor).
  [[nodiscard]] absl::Status Enqueue(cudaStream_t stream, const void* x, const void* w,
                                     const void* bias, void* y);

  [[nodiscard]] const LinearOptions& options() const { return options_; }
  // How much of the shared workspace the chosen algorithm uses.
  [[nodiscard]] std::size_t workspace_bytes_used() const { return workspace_used_; }

 private:
  CublasLtLinear() = default;
  void Release();

  std::shared_ptr<const CublasLtContext> context_;
  LinearOptions options_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  cublasLtMatrixLayout_t x_layout_ = nullptr;
  cublasLtMatrixLayout_t y_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  std::size_t workspace_used_ = 0;
};

}  // namespace baton
