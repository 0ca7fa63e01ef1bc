// What the projection ops share (ops/gemv.h, ops/wide_gemv.h, ops/gemm.h):
// a weight, its shape, what the projection reads and writes besides it
// (kernels/gemv_io.h) and the rows it covers, and the checks every one of
// them makes. Plain data.
#pragma once

#include "kernels/decode_batch.h"
#include "kernels/gemv_io.h"
#include "ops/op.h"

namespace baton::ops {

// The projections' vocabulary (kernels/gemv_io.h).
using GemvInput = detail::decode::GemvInput;
using GemvOutput = detail::decode::GemvOutput;
using GemvIo = detail::decode::GemvIo;

template <class O>
struct ProjectionArgs {
  using Op = O;
  DecoderDType dtype = DecoderDType::kBFloat16;
  GemvOutput output = GemvOutput::kStore;
  const void* w = nullptr;  // [out_features, in_features] row-major (a PyTorch Linear weight)
  int out_features = 0;
  int in_features = 0;
  GemvIo io;
  DecodeBatch batch;
};

// Sizes >= 1, rows of 16 bytes (in_features % 8 == 0), W 16-byte aligned
// (present too, when `w_present`), and a live count to read.
template <class O>
bool projection_ok(const ProjectionArgs<O>& a, bool w_present) {
  return a.out_features >= 1 && a.in_features >= 1 &&
         a.in_features % detail::decode::kVector == 0 && aligned16(a.w) &&
         (!w_present || a.w != nullptr) && a.batch.active != nullptr;
}

}  // namespace baton::ops
