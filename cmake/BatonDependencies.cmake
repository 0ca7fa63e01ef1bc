# Finds Baton's dependencies the standard way. Shared by the build and by the
# installed package config (batonConfig.cmake), so consumers resolve the same
# targets the library was built against.
include_guard(GLOBAL)
include(CMakeFindDependencyMacro)

find_package(CUDAToolkit 13.0 REQUIRED)

# CUDA 13 keeps CCCL (CUB, libcu++, Thrust) under include/cccl, which CMake 3.25
# does not add for host code; the toolkit's own CCCL package config does.
find_package(CCCL CONFIG REQUIRED
  HINTS "${CUDAToolkit_LIBRARY_DIR}/cmake/cccl" "${CUDAToolkit_LIBRARY_ROOT}/lib64/cmake/cccl")

find_package(absl CONFIG REQUIRED)
include(BatonAbslStatic)
baton_use_static_absl()
