# shellcheck shell=bash
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
# sync-checked by the decode_*_gpu_test binaries).
# device_fault_gpu_test
# traps and writes out of bounds on purpose (in child processes) to test how
# the runtime reports a lost context: every tool would rightly report those
# faults.
#
# dynamic_parallelism_gpu_test, decoder_dp_gpu_test, decoder_checkpoint_gpu_test,
# decoder_prefill_gpu_test and decoder_host_loop_gpu_test (whose cases also run
# the dynamic-parallelism engine) launch kernels from the device: racecheck,
# synccheck and initcheck print "CUDA Dynamic Parallelism is not supported by
# the selected tool" and count it as an error (CUDA 13.0); memcheck supports
# it and runs them. Run alone on decoder_prefill_gpu_test (H100 2026-11-24,
# results/h100-2026-11-24-prefill-sanitizer-reports.txt), synccheck prints that
# warning at the first test and then reports divergent barriers in Baton's
# row_kernel<half, kEmbedding, norm> on the tail-launch engine's first
# device-launched step (threads 64-127 of block 0), and racecheck an illegal
# address in that step; the same kernel launched directly is sync-checked
# clean by decode_row_kernels_gpu_test, and memcheck runs this binary clean.
# Not explained further: reports inside device-launched graphs from a tool
# that says it does not support them. initcheck prints it for decoder_model_gpu_test too: a
# DecoderModel opts its device step's kernels in to their shared memory when
# it is created.
#
# sanitizer_skips TOOL BINARY_NAME: prints the reason and returns 0 to skip.
sanitizer_skips() {
  case "$1:$2" in
    racecheck:cublaslt_graph_gpu_test | synccheck:cublaslt_graph_gpu_test | \
    racecheck:decoder_model_gpu_test | synccheck:decoder_model_gpu_test)
      echo "library kernels; see scripts/sanitizer_skips.sh"; return 0 ;;
    racecheck:dynamic_parallelism_gpu_test | synccheck:dynamic_parallelism_gpu_test | \
    initcheck:dynamic_parallelism_gpu_test | racecheck:decoder_dp_gpu_test | \
    synccheck:decoder_dp_gpu_test | initcheck:decoder_dp_gpu_test | \
    racecheck:decoder_checkpoint_gpu_test | synccheck:decoder_checkpoint_gpu_test | \
    initcheck:decoder_checkpoint_gpu_test | racecheck:decoder_host_loop_gpu_test | \
    synccheck:decoder_host_loop_gpu_test | initcheck:decoder_host_loop_gpu_test | \
    racecheck:decoder_prefill_gpu_test | synccheck:decoder_prefill_gpu_test | \
    initcheck:decoder_prefill_gpu_test | initcheck:decoder_model_gpu_test)
      echo "this tool does not support dynamic parallelism; memcheck runs it"; return 0 ;;
    *:device_fault_gpu_test) echo "faults on purpose; see scripts/sanitizer_skips.sh"; return 0 ;;
  esac
  return 1
}

# Single tests a tool leaves out of a binary it otherwise runs (the plain
# suite runs them):
#
# memcheck, dynamic_parallelism_gpu_test PendingLaunchLimitHitOnPurpose...:
# past the device runtime's pending-launch limit, memcheck reports the first
# store of a device-side <<<>>> launch's arguments into the parameter buffer
# that cudaGetParameterBufferV2 had just returned (non-null: the generated
# code checks) as an out-of-bounds write, and its abort turns the refused
# launch the test asserts into a lost context. The faulting instruction
# (SASS offset 0x4040 of the scheduler, H200 2026-11-23) is that
# compiler-generated store, not Baton's code.
#
# Every tool, reliability_gpu_test SeededEqualsCompletedPlusDrainedAcrossRestarts
# and work_queue_gpu_test HostSeedsWhileDeviceConsumesThenClose...: they need
# the device to keep pace with the host (items still queued at each Stop; a
# 20 s bound on seeding 8M items), which the tools' slowdown of the device and
# interception of every host API call reverse (H200 2026-11-23: 0 errors
# under memcheck and synccheck, the timing expectations failed; under
# synccheck and initcheck the reliability binary then ran past 120 s).
#
# sanitizer_excluded_tests TOOL BINARY_NAME: prints a gtest negative pattern
# (empty when nothing is excluded).
#
# racecheck (slower still), three more of the same kind, H200 2026-11-23,
# each run by racecheck with 0 hazards before it failed or ran out of time:
# work_queue_gpu_test's contention tests (ExactlyOnce*, TicketsWrapAcross2To64) end their consumers
# after a time budget (100M items; under racecheck the warps ran out of time
# with most items still queued), reliability_gpu_test's
# WatchdogNeverFiresOnAHealthyLoop needs more than 100 steps in its window
# (67 and 75 ran), and sampling_gpu_test's
# FrequenciesFollowTheRenormalisedSoftmax (the kernels of the other sampling
# cases, repeated for statistics) ran past 230 s.
sanitizer_excluded_tests() {
  case "$1:$2" in
    memcheck:dynamic_parallelism_gpu_test) echo "*PendingLaunchLimitHitOnPurpose*" ;;
    racecheck:reliability_gpu_test)
      echo "*SeededEqualsCompletedPlusDrainedAcrossRestarts*:*WatchdogNeverFiresOnAHealthyLoop*" ;;
    racecheck:work_queue_gpu_test) echo "*HostSeedsWhileDeviceConsumesThenClose*:*ExactlyOnce*:*TicketsWrapAcross2To64*" ;;
    racecheck:sampling_gpu_test) echo "*FrequenciesFollowTheRenormalisedSoftmax*" ;;
    *:reliability_gpu_test) echo "*SeededEqualsCompletedPlusDrainedAcrossRestarts*" ;;
    *:work_queue_gpu_test) echo "*HostSeedsWhileDeviceConsumesThenClose*" ;;
  esac
}

# sanitizer_gtest_filter TOOL BINARY_NAME [POSITIVE]: the --gtest_filter value
# for a sanitizer run (POSITIVE, default all, minus the excluded tests), or
# empty when neither narrows the run.
sanitizer_gtest_filter() {
  local excluded
  excluded=$(sanitizer_excluded_tests "$1" "$2")
  if [ -n "$excluded" ]; then
    echo "${3:-*}-$excluded"
  else
    echo "${3:-}"
  fi
}

# The error count a compute-sanitizer log ends with: "ERROR SUMMARY: N errors"
# (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ... (N errors, ...)".
sanitizer_errors() {
  grep -E "(ERROR|RACECHECK) SUMMARY" "$1" | grep -oE "[0-9]+ errors?" | tail -n 1 | grep -oE "^[0-9]+"
}
