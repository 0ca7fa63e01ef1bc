// What a row kernel (kernels/row_kernel_body.cuh) reads and writes besides
// its batch: plain data, built by the host's plan and the tests alike.
#pragma once

#include <cstdint>

namespace baton::detail::decode {

// Row kernels: embedding, residual add and RMSNorm over one position's
// d_model row, alone or fused; a block of kRowThreads per row.
inline constexpr int kRowThreads = 128;

// What a row kernel reads: the residual stream, embedding rows (which it
// stores as the stream) or the stream plus a delta (which it adds first).
enum class RowSource : std::uint32_t { kHidden, kEmbedding, kResidual };

struct RowArgs {
  const void* source = nullptr;  // embedding table or residual delta (dtype)
  const std::int32_t* tokens = nullptr;
  float* hidden = nullptr;
  const void* weight = nullptr;  // RMSNorm weight (dtype); null: no norm
  void* out = nullptr;           // RMSNorm output (dtype)
};

}  // namespace baton::detail::decode
