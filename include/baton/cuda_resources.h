// Owning wrappers for CUDA resources: device memory, mapped host memory,
// streams, events, graphs and graph execs. Move-only; each releases its
// resource exactly once. Factories return StatusOr so allocation failures
// surface as Status instead of leaking a half-built object.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/status.h"

namespace baton {

// A move-only owner of one CUDA handle, released with Destroy.
template <typename Handle, cudaError_t (*Destroy)(Handle)>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(Handle handle) : handle_(handle) {}
  CudaHandle(CudaHandle&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  CudaHandle& operator=(CudaHandle&& other) noexcept {
    if (this != &other) reset(std::exchange(other.handle_, Handle{}));
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  ~CudaHandle() { reset(); }

  [[nodiscard]] Handle get() const { return handle_; }
  [[nodiscard]] explicit operator bool() const { return handle_ != Handle{}; }
  // Gives up ownership without destroying.
  [[nodiscard]] Handle release() { return std::exchange(handle_, Handle{}); }
  void reset(Handle handle = Handle{}) {
    // Destruction errors are ignored: a destructor has nobody to report to, and
    // a sticky error will surface at the owner's next checked call.
    if (handle_ != Handle{}) (void)Destroy(handle_);
    handle_ = handle;
  }

 private:
  Handle handle_{};
};

using Stream = CudaHandle<cudaStream_t, cudaStreamDestroy>;
using Event = CudaHandle<cudaEvent_t, cudaEventDestroy>;
using Graph = CudaHandle<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = CudaHandle<cudaGraphExec_t, cudaGraphExecDestroy>;

[[nodiscard]] absl::StatusOr<Stream> CreateStream(unsigned int flags = cudaStreamNonBlocking);
[[nodiscard]] absl::StatusOr<Event> CreateEvent(unsigned int flags = cudaEventDefault);
[[nodiscard]] absl::StatusOr<Graph> CreateGraph();
// Instantiates `graph` with cudaGraphInstantiate flags (e.g.
// cudaGraphInstantiateFlagDeviceLaunch). Validation of what the graph holds is
// the graph toolkit's job; this only owns the result.
[[nodiscard]] absl::StatusOr<GraphExec> InstantiateGraph(cudaGraph_t graph,
                                                         unsigned long long flags = 0);

// Device memory for `count` elements of T, freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  [[nodiscard]] static absl::StatusOr<DeviceBuffer> Create(size_t count) {
    DeviceBuffer buffer;
    if (count > 0) {
      void* ptr = nullptr;
      BATON_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, count * sizeof(T)));
      buffer.ptr_ = static_cast<T*>(ptr);
    }
    buffer.count_ = count;
    return buffer;
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Free();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Free(); }

  [[nodiscard]] T* data() const { return ptr_; }
  [[nodiscard]] size_t size() const { return count_; }
  [[nodiscard]] size_t bytes() const { return count_ * sizeof(T); }

  // Fills every byte with `byte` (poisoning before a run shows unwritten elements).
  [[nodiscard]] absl::Status Fill(int byte, cudaStream_t stream = nullptr) {
    BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr_, byte, bytes(), stream));
    return absl::OkStatus();
  }
  // Synchronous copies of the whole buffer (sizes must match).
  [[nodiscard]] absl::Status CopyFrom(absl::Span<const T> host) {
    if (host.size() != count_) {
      return absl::InvalidArgumentError(
          "DeviceBuffer::CopyFrom: host span size differs from buffer size");
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  [[nodiscard]] absl::Status CopyTo(absl::Span<T> host) const {
    if (host.size() != count_) {
      return absl::InvalidArgumentError(
          "DeviceBuffer::CopyTo: host span size differs from buffer size");
    }
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }

 private:
  void Free() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Pinned host memory mapped into the device address space: the device writes,
// the host polls without a synchronizing copy (the completion mailbox).
template <typename T>
class MappedHostBuffer {
 public:
  MappedHostBuffer() = default;
  [[nodiscard]] static absl::StatusOr<MappedHostBuffer> Create(size_t count) {
    MappedHostBuffer buffer;
    if (count > 0) {
      void* host = nullptr;
      BATON_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, count * sizeof(T), cudaHostAllocMapped));
      buffer.host_ = static_cast<T*>(host);
      void* device = nullptr;
      // On failure `buffer` still owns (and frees) the pinned allocation.
      BATON_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device, host, 0));
      buffer.device_ = static_cast<T*>(device);
    }
    buffer.count_ = count;
    return buffer;
  }
  MappedHostBuffer(MappedHostBuffer&& other) noexcept
      : host_(std::exchange(other.host_, nullptr)),
        device_(std::exchange(other.device_, nullptr)),
        count_(std::exchange(other.count_, 0)) {}
  MappedHostBuffer& operator=(MappedHostBuffer&& other) noexcept {
    if (this != &other) {
      Free();
      host_ = std::exchange(other.host_, nullptr);
      device_ = std::exchange(other.device_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  MappedHostBuffer(const MappedHostBuffer&) = delete;
  MappedHostBuffer& operator=(const MappedHostBuffer&) = delete;
  ~MappedHostBuffer() { Free(); }

  [[nodiscard]] T* host() const { return host_; }
  [[nodiscard]] T* device() const { return device_; }
  [[nodiscard]] size_t size() const { return count_; }

 private:
  void Free() {
    if (host_ != nullptr) (void)cudaFreeHost(host_);
    host_ = device_ = nullptr;
    count_ = 0;
  }
  T* host_ = nullptr;
  T* device_ = nullptr;
  size_t count_ = 0;
};

}  // namespace baton
