# Installs Baton as a CMake package: find_package(baton CONFIG) gives
# baton::baton (the runtime and the decoder model) and each layer as
# baton::<layer> (baton::runtime for a program without the model).
#
# The build tree is a package too (its root holds batonConfig.cmake), so a
# project can link the libraries this build made without installing them:
# find_package(baton CONFIG PATHS <build tree> NO_DEFAULT_PATH). The Python
# package does (BATON_PREBUILT, python/CMakeLists.txt): every layer is compiled
# position-independent, and Abseil's linkage is left to the consumer, so its
# shared module links these same static libraries with the shared Abseil.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Every layer is a static library, so a consumer links them all; the model's
# dynamic-parallelism device link ships beside them. Only include/baton/ is
# installed: internal headers and the fixtures never are.
get_property(baton_layer_targets GLOBAL PROPERTY BATON_LAYER_TARGETS)
install(TARGETS ${baton_layer_targets} baton_model_dp baton_all EXPORT batonTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/baton DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The installed package: its config finds the dependency modules beside itself.
set(BATON_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/baton)
set(baton_install_config ${PROJECT_BINARY_DIR}/CMakeFiles/baton-install)
set(BATON_CONFIG_MODULE_DIR "\${CMAKE_CURRENT_LIST_DIR}")
install(EXPORT batonTargets NAMESPACE baton:: DESTINATION ${BATON_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/batonConfig.cmake.in
  ${baton_install_config}/batonConfig.cmake INSTALL_DESTINATION ${BATON_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/batonConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${baton_install_config}/batonConfig.cmake
  ${PROJECT_BINARY_DIR}/batonConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/BatonDependencies.cmake
  ${PROJECT_SOURCE_DIR}/cmake/BatonAbslStatic.cmake
  DESTINATION ${BATON_CMAKE_INSTALL_DIR})

# The build tree's package: the targets as built here (their headers through
# the layers' include folders), the dependency modules from the source tree.
set(BATON_CONFIG_MODULE_DIR "${PROJECT_SOURCE_DIR}/cmake")
export(EXPORT batonTargets NAMESPACE baton:: FILE ${PROJECT_BINARY_DIR}/batonTargets.cmake)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/batonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/batonConfig.cmake INSTALL_DESTINATION ${PROJECT_BINARY_DIR}
  INSTALL_PREFIX ${PROJECT_BINARY_DIR})
unset(BATON_CONFIG_MODULE_DIR)
