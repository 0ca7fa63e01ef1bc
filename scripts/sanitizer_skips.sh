# Sourced by scripts/gpu_suite.sh and scripts/sanitize_test.sh: the GPU test
# binaries a compute-sanitizer tool skips, with the reason (the other tools
# still run them).
#
# cublaslt_graph_gpu_test runs cuBLASLt's Hopper kernels: under racecheck they
# fault with an illegal address (memcheck runs the same test clean), and
# synccheck reports divergent barriers inside cuBLAS's small-N GEMM kernel
# (gemmSN_*), which --kernel-name-exclude does not reach for graph launches.
# Both are library code, not Baton's. decoder_model_gpu_test runs the same
# cuBLASLt kernels in its model's projections (its own kernels are raced and
# sync-checked by the decode_*_gpu_test binaries). device_fault_gpu_test
# traps and writes out of bounds on purpose (in child processes) to test how
# the runtime reports a lost context: every tool would rightly report those
# faults.
#
# dynamic_parallelism_gpu_test and decoder_dp_gpu_test launch kernels from the
# device: racecheck, synccheck and initcheck print "CUDA Dynamic Parallelism is
# not supported by the selected tool" and count it as an error (CUDA 13.0);
# memcheck supports it and runs both binaries.
#
# sanitizer_skips TOOL BINARY_NAME: prints the reason and returns 0 to skip.
sanitizer_skips() {
  case "$1:$2" in
    racecheck:cublaslt_graph_gpu_test | synccheck:cublaslt_graph_gpu_test | \
    racecheck:decoder_model_gpu_test | synccheck:decoder_model_gpu_test)
      echo "library kernels; see scripts/sanitizer_skips.sh"; return 0 ;;
    racecheck:dynamic_parallelism_gpu_test | synccheck:dynamic_parallelism_gpu_test | \
    initcheck:dynamic_parallelism_gpu_test | racecheck:decoder_dp_gpu_test | \
    synccheck:decoder_dp_gpu_test | initcheck:decoder_dp_gpu_test)
      echo "this tool does not support dynamic parallelism; memcheck runs it"; return 0 ;;
    *:device_fault_gpu_test) echo "faults on purpose; see scripts/sanitizer_skips.sh"; return 0 ;;
  esac
  return 1
}

# The error count a compute-sanitizer log ends with: "ERROR SUMMARY: N errors"
# (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ... (N errors, ...)".
sanitizer_errors() {
  grep -E "(ERROR|RACECHECK) SUMMARY" "$1" | grep -oE "[0-9]+ errors?" | tail -n 1 | grep -oE "^[0-9]+"
}
