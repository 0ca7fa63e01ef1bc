# Installs baton::runtime as a CMake package: find_package(baton CONFIG).
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# baton_dp (the dynamic-parallelism engine) is a link dependency of the static
# baton_runtime, so it ships in the same export.
install(TARGETS baton_runtime baton_dp EXPORT batonTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(folder IN LISTS BATON_SOURCE_FOLDERS)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/${folder}/baton
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()

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
