# Builds the layering probe twice (tests/layers/wrong_way_include.cc): linked
# to the runtime layer it must compile; linked to the foundation layer it must
# fail, and fail for the right reason (baton/runtime.h is not visible there).
# Inputs: BUILD_DIR.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target baton_layer_probe_runtime
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "control: the probe does not compile against the runtime layer:\n${out}${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target baton_layer_probe_foundation
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the foundation layer compiled an include of baton/runtime.h: layering is not "
                      "enforced")
endif()
if(NOT "${out}${err}" MATCHES "baton/runtime.h: No such file or directory")
  message(FATAL_ERROR "the probe failed for another reason than the missing header:\n${out}${err}")
endif()
message(STATUS "a wrong-way include fails to compile; the same include one layer up compiles")
