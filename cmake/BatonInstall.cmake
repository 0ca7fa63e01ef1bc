# Installs Baton as a CMake package: find_package(baton CONFIG) gives
# baton::baton (the runtime and the decoder model) and each layer as
# baton::<layer> (baton::runtime for a program without the model).
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

set(BATON_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/baton)
install(EXPORT batonTargets NAMESPACE baton:: DESTINATION ${BATON_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/batonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/batonConfig.cmake INSTALL_DESTINATION ${BATON_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/batonConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/batonConfig.cmake
  ${PROJECT_BINARY_DIR}/batonConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/BatonDependencies.cmake
  ${PROJECT_SOURCE_DIR}/cmake/BatonAbslStatic.cmake
  DESTINATION ${BATON_CMAKE_INSTALL_DIR})
