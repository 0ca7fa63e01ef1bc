// A projection through cuBLASLt (baton/cublaslt_matmul.h): y = x · Wᵀ
// (+ bias) with the bucket's plan for `projection`, the cuBLASLt plan's
// ops. Not a kernel of Baton's: the host driver enqueues it (kHostOnly), the
// device step never runs it (its plans are Baton's own kernels), and the
// graph path binds each node to the plans of the bucket it captures
// (OpFrame::linears).
#pragma once

#include <cstdint>

#include "ops/op.h"
#if !defined(__CUDACC__)
#include "absl/status/status.h"  // (Abseil stays out of .cu files: enqueue is the host driver's)
#endif

namespace baton::ops {

// The projections a bucket plans with cuBLASLt, by Projection.
enum class Projection : std::uint32_t { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3, kLmHead = 4 };
inline constexpr int kProjections = 5;

struct Linear : HostOp {
  static constexpr const char* kName = "linear";
  struct Args {
    using Op = Linear;
    Projection projection = Projection::kQkv;
    const void* x = nullptr;
    const void* w = nullptr;
    const void* bias = nullptr;  // optional
    void* y = nullptr;
    CublasLtLinear* plan = nullptr;  // bound per bucket
    std::uint32_t rows = 0;          // the bucket (for the refusal's message)
  };

  static cudaError_t check(const Args&) { return cudaSuccess; }  // enqueue names what is missing
  BATON_HOST_DEVICE static void bind(Args& a, const OpFrame& frame, const OpNode&) {
    a.plan = frame.linears != nullptr ? frame.linears[static_cast<int>(a.projection)] : nullptr;
    a.rows = frame.rows;
  }
#if !defined(__CUDACC__)
  // The plan's Enqueue; InternalError when the bucket has no plan for it.
  static absl::Status enqueue(const Args& a, cudaStream_t stream);
#endif
};

}  // namespace baton::ops
