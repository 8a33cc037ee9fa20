# Install rules: headers, the exported targets and a relocatable package config,
# so a host project can find_package(specdec CONFIG REQUIRED).
include(CMakePackageConfigHelpers)

set(SPECDEC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/specdec)
install(DIRECTORY include/specdec DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# One export set per component, so that a consumer loads (and finds the
# dependencies of) only what it asks for: find_package(specdec COMPONENTS
# core io) needs neither libtorch nor CUDA. Installed targets carry the same
# names as the in-tree aliases: specdec::specdec, specdec::io,
# specdec::tokenizer, specdec::cpu, specdec::torch, specdec::cuda.
set(_components core io tokenizer cpu)
set(_component_core specdec)
set(_component_io specdec_io)
set(_component_tokenizer specdec_tokenizer)
set(_component_cpu specdec_cpu)
if(TARGET specdec_torch)
  list(APPEND _components torch)
  set(_component_torch specdec_torch)
endif()
if(TARGET specdec_cuda)
  list(APPEND _components cuda)
  set(_component_cuda specdec_cuda)
endif()
foreach(_c IN LISTS _components)
  set(_t ${_component_${_c}})
  if(NOT _c STREQUAL "core")
    set_target_properties(${_t} PROPERTIES EXPORT_NAME ${_c})
  endif()
  install(TARGETS ${_t} EXPORT specdec-${_c}-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT specdec-${_c}-targets NAMESPACE specdec:: DESTINATION ${SPECDEC_CMAKE_DIR})
endforeach()
string(REPLACE ";" " " SPECDEC_COMPONENTS "${_components}")

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
