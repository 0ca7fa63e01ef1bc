#include "baton/cublaslt_matmul.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "foundation/enum_table.h"
#include "kernels/cublas_status.h"

namespace baton {
namespace {

// Each data type once: the CUDA type cuBLASLt is told and its element size.
struct DataTypeRow {
  MatmulDataType value;
  cudaDataType_t cuda;
  std::size_t bytes;
};
constexpr DataTypeRow kDataTypes[] = {
    {MatmulDataType::kFloat32, CUDA_R_32F, 4},
    {MatmulDataType::kFloat16, CUDA_R_16F, 2},
    {MatmulDataType::kBFloat16, CUDA_R_16BF, 2},
};

// Each epilogue once: its cuBLASLt epilogue and its name in messages.
struct EpilogueRow {
  MatmulEpilogue value;
  cublasLtEpilogue_t lt;
  const char* name;
};
constexpr EpilogueRow kEpilogues[] = {
    {MatmulEpilogue::kNone, CUBLASLT_EPILOGUE_DEFAULT, "none"},
    {MatmulEpilogue::kBias, CUBLASLT_EPILOGUE_BIAS, "bias"},
    {MatmulEpilogue::kBiasRelu, CUBLASLT_EPILOGUE_RELU_BIAS, "bias+relu"},
    {MatmulEpilogue::kBiasGelu, CUBLASLT_EPILOGUE_GELU_BIAS, "bias+gelu"},
};

cudaDataType_t CudaType(MatmulDataType type) {
  return ColumnOf(kDataTypes, type, &DataTypeRow::cuda, CUDA_R_32F);
}

cublasLtEpilogue_t LtEpilogue(MatmulEpilogue epilogue) {
  return ColumnOf(kEpilogues, epilogue, &EpilogueRow::lt, CUBLASLT_EPILOGUE_DEFAULT);
}

constexpr std::uint32_t kAlignmentBytes = 16;

bool Aligned(const void* ptr) {
  return reinterpret_cast<std::uintptr_t>(ptr) % kAlignmentBytes == 0;
}

}  // namespace

std::string MatmulEpilogueName(MatmulEpilogue epilogue) {
  return ColumnOf(kEpilogues, epilogue, &EpilogueRow::name, "unknown");
}

std::size_t MatmulElementBytes(MatmulDataType type) {
  return ColumnOf(kDataTypes, type, &DataTypeRow::bytes, 2);
}

absl::StatusOr<std::shared_ptr<CublasLtContext>> CublasLtContext::Create(
    std::size_t workspace_bytes) {
  if (workspace_bytes == 0) {
    return absl::InvalidArgumentError(
        "CublasLtContext: workspace_bytes is 0; without an explicit workspace cuBLASLt may "
        "allocate during capture, which no device-launched graph can hold");
  }
  std::shared_ptr<CublasLtContext> context(new CublasLtContext());
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&context->handle_));
  BATON_ASSIGN_OR_RETURN(context->workspace_, DeviceBuffer<unsigned char>::Create(workspace_bytes));
  return context;
}

CublasLtContext::~CublasLtContext() {
  if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
}

absl::Status ValidateLinearOptions(const LinearOptions& options) {
  if (options.tokens < 1 || options.in_features < 1 || options.out_features < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear layer: tokens (", options.tokens, "), in_features (", options.in_features,
        ") and out_features (", options.out_features, ") must all be >= 1"));
  }
  const std::size_t element = MatmulElementBytes(options.data_type);
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"in_features", options.in_features},
        std::pair<const char*, int>{"out_features", options.out_features}}) {
    if ((static_cast<std::size_t>(value) * element) % kAlignmentBytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("linear layer: ", name, " = ", value, " makes rows of ",
                       static_cast<std::size_t>(value) * element,
                       " bytes; rows must be a multiple of 16 bytes (pad ", name,
                       " to a multiple of ", kAlignmentBytes / element, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CublasLtLinear> CublasLtLinear::Create(
    std::shared_ptr<const CublasLtContext> context, const LinearOptions& options) {
  if (context == nullptr) return absl::InvalidArgumentError("CublasLtLinear: context is null");
  BATON_RETURN_IF_ERROR(ValidateLinearOptions(options));
  CublasLtLinear plan;
  plan.context_ = std::move(context);
  plan.options_ = options;
  const cudaDataType_t type = CudaType(options.data_type);
  const std::uint64_t m = options.out_features;
  const std::uint64_t n = options.tokens;
  const std::uint64_t k = options.in_features;

  // Column-major view of row-major data: W[out, in] is a k x m matrix (used
  // transposed), X[tokens, in] is k x n, Y[tokens, out] is m x n.
  BATON_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan.desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t keep = CUBLAS_OP_N;
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  BATON_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc_, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  const cublasLtEpilogue_t epilogue = LtEpilogue(options.epilogue);
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.w_layout_, type, k, m, k));
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.x_layout_, type, k, n, k));
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.y_layout_, type, m, n, m));

  cublasLtMatmulPreference_t preference = nullptr;
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  const std::size_t workspace = plan.context_->workspace_bytes();
  cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  for (const cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (set == CUBLAS_STATUS_SUCCESS) {
      set = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &kAlignmentBytes,
                                                 sizeof(kAlignmentBytes));
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t heuristic = set;
  if (set == CUBLAS_STATUS_SUCCESS) {
    heuristic = cublasLtMatmulAlgoGetHeuristic(plan.context_->handle(), plan.desc_, plan.w_layout_,
                                               plan.x_layout_, plan.y_layout_, plan.y_layout_,
                                               preference, 1, &result, &found);
  }
  (void)cublasLtMatmulPreferenceDestroy(preference);
  BATON_CUBLAS_RETURN_IF_ERROR(heuristic);
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::NotFoundError(absl::StrCat(
        "cuBLASLt found no algorithm for a ", options.tokens, "x", options.in_features, " · ",
        options.in_features, "x", options.out_features, " linear layer with epilogue ",
        MatmulEpilogueName(options.epilogue), " within a ", workspace,
        "-byte workspace; use a larger workspace or another data type"));
  }
  plan.algo_ = result.algo;
  plan.workspace_used_ = result.workspaceSize;
  return plan;
}

CublasLtLinear::CublasLtLinear(CublasLtLinear&& other) noexcept { *this = std::move(other); }

CublasLtLinear& CublasLtLinear::operator=(CublasLtLinear&& other) noexcept {
  if (this != &other) {
    Release();
    context_ = std::move(other.context_);
    options_ = other.options_;
    desc_ = std::exchange(other.desc_, nullptr);
    w_layout_ = std::exchange(other.w_layout_, nullptr);
    x_layout_ = std::exchange(other.x_layout_, nullptr);
    y_layout_ = std::exchange(other.y_layout_, nullptr);
    algo_ = other.algo_;
    workspace_used_ = other.workspace_used_;
  }
  return *this;
}

CublasLtLinear::~CublasLtLinear() { Release(); }

void CublasLtLinear::Release() {
  if (desc_ != nullptr) (void)cublasLtMatmulDescDestroy(desc_);
  if (w_layout_ != nullptr) (void)cublasLtMatrixLayoutDestroy(w_layout_);
  if (x_layout_ != nullptr) (void)cublasLtMatrixLayoutDestroy(x_layout_);
  if (y_layout_ != nullptr) (void)cublasLtMatrixLayoutDestroy(y_layout_);
  desc_ = nullptr;
  w_layout_ = x_layout_ = y_layout_ = nullptr;
}

absl::Status CublasLtLinear::Enqueue(cudaStream_t stream, const void* x, const void* w,
                                     const void* bias, void* y) {
  if (desc_ == nullptr) return absl::FailedPreconditionError("CublasLtLinear: moved-from plan");
  const bool needs_bias = options_.epilogue != MatmulEpilogue::kNone;
  if (x == nullptr || w == nullptr || y == nullptr || (needs_bias && bias == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("CublasLtLinear::Enqueue: x, w, y",
                                                   needs_bias ? " and bias" : "",
                                                   " must be device pointers, not null"));
  }
  if (!Aligned(x) || !Aligned(w) || !Aligned(y) || (needs_bias && !Aligned(bias))) {
    return absl::InvalidArgumentError(
        "CublasLtLinear::Enqueue: every pointer must be 16-byte aligned (the plan's algorithm "
        "was chosen for that alignment)");
  }
  if (needs_bias) {
    BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  BATON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      context_->handle(), desc_, &alpha, w, w_layout_, x, x_layout_, &beta, y, y_layout_, y,
      y_layout_, &algo_, context_->workspace(), context_->workspace_bytes(), stream));
  return absl::OkStatus();
}

}  // namespace baton
