// Build-wide definitions shared by host and device code. No Abseil here: .cu
// files include it.
#pragma once

// Marks small helpers callable from both host and device code.
#if defined(__CUDACC__)
#define BATON_HOST_DEVICE __host__ __device__
#else
#define BATON_HOST_DEVICE
#endif
