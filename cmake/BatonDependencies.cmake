# Finds Baton's dependencies the standard way. Shared by the build and by the
# installed package config (batonConfig.cmake), so consumers resolve the same
# targets the library was built against.
include_guard(GLOBAL)
include(CMakeFindDependencyMacro)

find_package(CUDAToolkit 13.0 REQUIRED)
# The device runtime (dynamic parallelism, baton_dp). FindCUDAToolkit names it
# CUDA::cudadevrt only from CMake 3.26 on.
if(NOT TARGET CUDA::cudadevrt)
  find_library(BATON_CUDADEVRT_LIBRARY cudadevrt HINTS "${CUDAToolkit_LIBRARY_DIR}" REQUIRED)
  add_library(CUDA::cudadevrt STATIC IMPORTED)
  set_target_properties(CUDA::cudadevrt PROPERTIES IMPORTED_LOCATION "${BATON_CUDADEVRT_LIBRARY}")
endif()

# CUDA 13 keeps CCCL (CUB, libcu++, Thrust) under <toolkit>/include/cccl, which CMake 3.25
# does not add for host code; the toolkit's own CCCL package config does.
find_package(CCCL CONFIG REQUIRED
  HINTS "${CUDAToolkit_LIBRARY_DIR}/cmake/cccl" "${CUDAToolkit_LIBRARY_ROOT}/lib64/cmake/cccl")

# config.json parsing (the checkpoint loader): Debian's nlohmann-json3-dev.
find_package(nlohmann_json 3 REQUIRED)

find_package(absl CONFIG REQUIRED)
# baton_use_static_absl() (opt-in): the build calls it for its own programs;
# the installed package config does not, so a consumer's Abseil stays linked
# the way the consumer found it.
include(BatonAbslStatic)
