// Planted bugs, one per compute-sanitizer tool. scripts/gpu_suite.sh runs each
// under its tool BEFORE the real suite and requires the tool to report it: a
// sanitizer run whose control comes back clean did not really attach, so its
// "0 errors" on the suite would prove nothing.
//
//   sanitizer_control memcheck    global write 4 MiB past the end of an allocation
//   sanitizer_control racecheck   shared-memory write/read race without a barrier
//   sanitizer_control synccheck   __syncthreads() in divergent code
//   sanitizer_control initcheck   device memory read before anything wrote it
//
// Exit status is 0 whatever happens on the device: the tool's report is the
// result, and an error exit would hide whether the tool or the bug spoke.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

__global__ void out_of_bounds_write(int* data, int n) {
  // Far past the end: a write just past it can land in allocation padding,
  // which memcheck does not report.
  if (threadIdx.x == 0) data[n + (1 << 20)] = n;
}

__global__ void shared_memory_race(int* out) {
  __shared__ int cell[64];
  cell[threadIdx.x] = static_cast<int>(threadIdx.x);
  // No __syncthreads(): this read races with another warp's write.
  out[threadIdx.x] = cell[(threadIdx.x + 32) % 64];
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();  // only part of the block arrives
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

__global__ void read_uninitialized(const int* in, int* out) {
  out[threadIdx.x] = in[threadIdx.x] + 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* tool = argc > 1 ? argv[1] : "";
  int* a = nullptr;
  int* b = nullptr;
  if (cudaMalloc(&a, 64 * sizeof(int)) != cudaSuccess ||
      cudaMalloc(&b, 64 * sizeof(int)) != cudaSuccess) {
    std::fprintf(stderr, "sanitizer_control: no device memory\n");
    return 2;
  }
  if (std::strcmp(tool, "memcheck") == 0) {
    out_of_bounds_write<<<1, 64>>>(a, 63);
  } else if (std::strcmp(tool, "racecheck") == 0) {
    shared_memory_race<<<1, 64>>>(a);
  } else if (std::strcmp(tool, "synccheck") == 0) {
    divergent_barrier<<<1, 64>>>(a);
  } else if (std::strcmp(tool, "initcheck") == 0) {
    read_uninitialized<<<1, 64>>>(b, a);
  } else {
    std::fprintf(stderr, "usage: sanitizer_control memcheck|racecheck|synccheck|initcheck\n");
    return 2;
  }
  const cudaError_t error = cudaDeviceSynchronize();
  std::printf("sanitizer_control %s: kernel finished with %s\n", tool, cudaGetErrorName(error));
  return 0;
}
