#include "common/bandwidth.h"

#include <cstdint>

#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/status.h"
#include "common/timing.h"

namespace baton::samples {
namespace {

constexpr int kReadThreads = 512;
constexpr int kReadBlocksPerSm = 4;  // 2048 threads: a full SM
constexpr int kReadInFlight = 4;     // 16-byte loads per thread per round

// Streams `n` 16-byte vectors once (streaming loads, kReadInFlight per thread
// in flight); the XOR of what it read is stored only if it matches a value
// nobody writes, so the loads cannot be removed and nothing else is written.
__global__ void __launch_bounds__(kReadThreads)
    read_stream_kernel(const uint4* __restrict__ data, std::size_t n, unsigned* sink) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (kReadInFlight - 1) * stride < n; i += kReadInFlight * stride) {
    uint4 v[kReadInFlight];
#pragma unroll
    for (int j = 0; j < kReadInFlight; ++j) v[j] = __ldcs(data + i + j * stride);
#pragma unroll
    for (int j = 0; j < kReadInFlight; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n; i += stride) acc ^= __ldcs(data + i).x;
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

absl::StatusOr<HbmBandwidth> MeasureHbmBandwidth(cudaStream_t stream) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  constexpr int kWarmup = 2, kRepeats = 9;
  BATON_ASSIGN_OR_RETURN(auto a, DeviceBuffer<unsigned char>::Create(kBytes));
  BATON_ASSIGN_OR_RETURN(auto b, DeviceBuffer<unsigned char>::Create(kBytes));
  BATON_ASSIGN_OR_RETURN(auto sink, DeviceBuffer<unsigned>::Create(1));
  BATON_RETURN_IF_ERROR(a.Fill(1, stream));
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  HbmBandwidth out;
  BATON_ASSIGN_OR_RETURN(
      TimingSummary copy, TimeWithEvents(stream, kWarmup, kRepeats, [&]() -> absl::Status {
        BATON_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(b.data(), a.data(), kBytes, cudaMemcpyDeviceToDevice, stream));
        return absl::OkStatus();
      }));
  out.copy_bytes_per_s = 2.0 * kBytes / (copy.median_ms * 1e-3);
  const int blocks = device.multiprocessors * kReadBlocksPerSm;
  BATON_ASSIGN_OR_RETURN(
      TimingSummary read, TimeWithEvents(stream, kWarmup, kRepeats, [&]() -> absl::Status {
        read_stream_kernel<<<blocks, kReadThreads, 0, stream>>>(
            reinterpret_cast<const uint4*>(a.data()), kBytes / sizeof(uint4), sink.data());
        BATON_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        return absl::OkStatus();
      }));
  out.read_bytes_per_s = kBytes / (read.median_ms * 1e-3);
  return out;
}

}  // namespace baton::samples
