# Installs the build tree into a scratch prefix, builds tests/consumer against
# it with find_package(baton CONFIG), runs the result (without a GPU it says
# so and succeeds: linking is what this machine can check) and leaves it in
# BIN_DIR as install_consumer, which the GPU suite runs on a GPU.
# Inputs: BATON_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, CMAKE_CUDA_ARCHITECTURES,
# BATON_SNIPPET, BIN_DIR.
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install "${BATON_BUILD_DIR}" --prefix "${prefix}")
run_step("configure consumer" ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build"
  -G Ninja -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES} -DBATON_SNIPPET=${BATON_SNIPPET})
run_step("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("run consumer" "${WORK_DIR}/build/baton_consumer")
message(STATUS "${step_output}")
file(COPY_FILE "${WORK_DIR}/build/baton_consumer" "${BIN_DIR}/install_consumer")
