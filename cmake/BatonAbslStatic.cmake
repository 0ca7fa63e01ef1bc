# Debian's Abseil package config imports shared libraries, but the GPU machines
# that run the GPU suite have no Abseil at all. The same package ships the static
# archives beside the .so files, so point every imported Abseil target at its
# archive. Targets whose archive is missing keep their shared library (and the
# configure step says so), which keeps other distributions working.
include_guard(GLOBAL)

# Call in the directory that ran find_package(absl): imported targets are
# scoped to it.
function(baton_use_static_absl)
  get_property(imported DIRECTORY PROPERTY IMPORTED_TARGETS)
  set(missing "")
  foreach(target IN LISTS imported)
    if(NOT target MATCHES "^absl::")
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    if(NOT type STREQUAL "SHARED_LIBRARY")
      continue()
    endif()
    get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
    foreach(config IN LISTS configs)
      get_target_property(location ${target} IMPORTED_LOCATION_${config})
      if(NOT location)
        continue()
      endif()
      string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" archive "${location}")
      if(EXISTS "${archive}")
        set_target_properties(${target} PROPERTIES
          IMPORTED_LOCATION_${config} "${archive}"
          IMPORTED_NO_SONAME_${config} TRUE)
      else()
        list(APPEND missing ${target})
      endif()
    endforeach()
  endforeach()
  if(missing)
    message(STATUS "baton: no static Abseil archive for ${missing}; those link shared")
  endif()
endfunction()
