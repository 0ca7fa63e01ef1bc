# Baton's layers: one CMake target per layer, linking only the layers below it.
#
# Public headers live in include/baton/ (one place; installed). Each layer
# claims the public headers it owns, and its target sees them through a
# folder of links made for that layer alone, so a layer sees the public
# headers of its own and of the layers it links, never those of a layer
# above: a wrong-way include fails to compile. Internal headers (shared with
# the layers above, never installed) are included as "<layer>/<file>" through
# the same folder; a layer's private headers are on its private include path
# only.
include_guard(GLOBAL)

set(BATON_LAYER_ROOT ${PROJECT_BINARY_DIR}/layers)

# baton_layer(NAME [INTERFACE] [SOURCES ...] [PUBLIC_HEADERS ...]
#             [INTERNAL_HEADERS ...] [LINKS ...] [PRIVATE_LINKS ...])
# Defines target baton_NAME (exported as baton::NAME) in the calling folder.
function(baton_layer name)
  cmake_parse_arguments(ARG "INTERFACE" "" "SOURCES;PUBLIC_HEADERS;INTERNAL_HEADERS;LINKS;PRIVATE_LINKS"
                        ${ARGN})
  set(target baton_${name})
  set(view ${BATON_LAYER_ROOT}/${name})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/baton ${view}/${name})
  foreach(header IN LISTS ARG_PUBLIC_HEADERS)
    set(source ${PROJECT_SOURCE_DIR}/include/baton/${header})
    if(NOT EXISTS ${source})
      message(FATAL_ERROR "baton_layer(${name}): public header include/baton/${header} does not exist")
    endif()
    get_property(owner GLOBAL PROPERTY BATON_PUBLIC_HEADER_${header})
    if(owner)
      message(FATAL_ERROR "baton_layer(${name}): include/baton/${header} is already owned by layer ${owner}")
    endif()
    set_property(GLOBAL PROPERTY BATON_PUBLIC_HEADER_${header} ${name})
    set_property(GLOBAL APPEND PROPERTY BATON_PUBLIC_HEADERS ${header})
    file(CREATE_LINK ${source} ${view}/baton/${header} SYMBOLIC)
  endforeach()
  foreach(header IN LISTS ARG_INTERNAL_HEADERS)  # (a header in a subfolder keeps it: "<layer>/<sub>/<file>")
    get_filename_component(folder ${view}/${name}/${header} DIRECTORY)
    file(MAKE_DIRECTORY ${folder})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/${header} ${view}/${name}/${header} SYMBOLIC)
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/baton)

  if(ARG_INTERFACE)
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${view}>
                                                   $<INSTALL_INTERFACE:include>)
    target_link_libraries(${target} INTERFACE ${ARG_LINKS})
  else()
    add_library(${target} STATIC ${ARG_SOURCES})
    target_include_directories(${target}
      PUBLIC $<BUILD_INTERFACE:${view}> $<INSTALL_INTERFACE:include>
      PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(${target} PUBLIC ${ARG_LINKS} PRIVATE ${ARG_PRIVATE_LINKS})
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
  endif()
  target_compile_features(${target} INTERFACE cxx_std_17)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(baton::${name} ALIAS ${target})
  set_property(GLOBAL APPEND PROPERTY BATON_LAYER_TARGETS ${target})
endfunction()

# Every header in include/baton/ belongs to exactly one layer.
function(baton_check_public_headers)
  file(GLOB present RELATIVE ${PROJECT_SOURCE_DIR}/include/baton ${PROJECT_SOURCE_DIR}/include/baton/*)
  get_property(claimed GLOBAL PROPERTY BATON_PUBLIC_HEADERS)
  foreach(header IN LISTS present)
    if(NOT header IN_LIST claimed)
      message(FATAL_ERROR "include/baton/${header} belongs to no layer: name it in a baton_layer(... PUBLIC_HEADERS)")
    endif()
  endforeach()
endfunction()

# A program may hold only one device link that uses the device runtime
# (docs/cuda-facts.md, D3: the second one's dynamic-parallelism launches fail with
# cudaErrorInvalidResourceHandle). Libraries that carry one say so with the
# target property BATON_DEVICE_LINK; this fails the configure when
# `executable` links two of them.
function(baton_check_device_links executable)
  set(seen "")
  set(pending ${executable})
  set(links "")
  while(pending)
    list(POP_FRONT pending target)
    if(NOT TARGET ${target} OR target IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${target})
    get_target_property(aliased ${target} ALIASED_TARGET)
    if(aliased)
      list(APPEND pending ${aliased})
      continue()
    endif()
    get_target_property(link ${target} BATON_DEVICE_LINK)
    if(link)
      list(APPEND links "${target} (${link})")
    endif()
    get_target_property(type ${target} TYPE)
    set(property INTERFACE_LINK_LIBRARIES)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${target} LINK_LIBRARIES)
      if(direct)
        list(APPEND pending ${direct})
      endif()
    endif()
    get_target_property(interface ${target} INTERFACE_LINK_LIBRARIES)
    if(interface)
      foreach(item IN LISTS interface)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
        string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" item "${item}")
        list(APPEND pending ${item})
      endforeach()
    endif()
  endwhile()
  list(LENGTH links count)
  if(count GREATER 1)
    list(JOIN links ", " text)
    message(FATAL_ERROR "${executable} links two device links that use the device runtime "
                        "(${text}); a program may hold only one (docs/cuda-facts.md, D3)")
  endif()
endfunction()
