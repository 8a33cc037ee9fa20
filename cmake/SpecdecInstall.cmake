# Install rules: headers, the exported targets and a relocatable package config,
# so a host project can find_package(specdec CONFIG REQUIRED).
include(CMakePackageConfigHelpers)

set(SPECDEC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/specdec)
install(DIRECTORY include/specdec DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_targets specdec specdec_io specdec_tokenizer)
if(TARGET specdec_torch)
  list(APPEND _targets specdec_torch)
endif()
if(TARGET specdec_cuda)
  list(APPEND _targets specdec_cuda)
endif()
install(TARGETS ${_targets} EXPORT specdec-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT specdec-targets NAMESPACE specdec:: DESTINATION ${SPECDEC_CMAKE_DIR})

set(SPECDEC_HAS_DLPACK OFF)
if(TARGET dlpack::dlpack)
  set(SPECDEC_HAS_DLPACK ON)
endif()
set(SPECDEC_HAS_TORCH OFF)
set(SPECDEC_HAS_CUDA OFF)
if(TARGET specdec_torch)
  set(SPECDEC_HAS_TORCH ON)
endif()
if(TARGET specdec_cuda)
  set(SPECDEC_HAS_CUDA ON)
endif()
configure_package_config_file(cmake/specdec-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/specdec-config.cmake INSTALL_DESTINATION ${SPECDEC_CMAKE_DIR})
# 0.x: minor versions may break the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/specdec-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/specdec-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/specdec-config-version.cmake
        DESTINATION ${SPECDEC_CMAKE_DIR})
