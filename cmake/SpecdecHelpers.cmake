# Helpers that keep leaf CMakeLists.txt files to one line per target.
include(GNUInstallDirs)

# Warnings for our own code; third-party headers come in as SYSTEM includes.
function(specdec_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
  if(SPECDEC_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# specdec_target_sanitize(target [TEST [OPTIMIZED]]): under ASan + UBSan the
# template-heavy tests dominate the build, so test executables (TEST) leave
# out UBSan's null and alignment checks (a fifth of their compile time: ASan
# reports a null dereference itself, and the code that reinterprets bytes, the
# parsers and kernels, is compiled into the libraries, which keep every check,
# and the parsers are fuzzed with all of them), and compile at -O0 (half the
# time again) unless OPTIMIZED: the tests that decode many samples or run the
# models need the build's optimization to finish.
function(specdec_target_sanitize target)
  cmake_parse_arguments(S "TEST;OPTIMIZED" "" "" ${ARGN})
  if(SPECDEC_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    if(S_TEST)
      target_compile_options(${target} PRIVATE -fno-sanitize=null,alignment)
      if(NOT S_OPTIMIZED)
        target_compile_options(${target} PRIVATE -O0)
      endif()
    endif()
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(SPECDEC_SANITIZE_THREAD)
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
endfunction()

# specdec_precompile_aten(target [SKIP source ...]): <ATen/ATen.h> costs about
# 15 s of parsing in every translation unit that includes it (half or more of
# most of them); a precompiled header parses it once per target. SKIP names
# the target's sources that do not use libtorch (they would only pay to load
# it). SPECDEC_PRECOMPILE_HEADERS=OFF turns it off.
function(specdec_precompile_aten target)
  cmake_parse_arguments(P "" "" "SKIP" ${ARGN})
  if(NOT SPECDEC_PRECOMPILE_HEADERS)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE <ATen/ATen.h>)
  if(P_SKIP)
    set_source_files_properties(${P_SKIP} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()

# specdec_add_test(NAME name [SERIAL] [OPTIMIZED] SOURCES a.cpp ... [LIBS lib ...] [GROUPS g ...])
# One Catch2 executable, registered with CTest per TEST_CASE. GROUPS (default:
# unit) names the tag groups the executable holds; each becomes a CTest label:
# unit (untagged by the others), statistical, torch, cuda ([cuda] tests report
# "skipped: no CUDA device" and CTest shows them as skipped where none exists).
function(specdec_add_test)
  cmake_parse_arguments(T "SERIAL;OPTIMIZED" "NAME" "SOURCES;LIBS;GROUPS" ${ARGN})
  # SERIAL: tests that measure their own threads' waits (the thread team's
  # back-off) run alone under `ctest -j`, not beside another test's cores.
  set(_serial)
  if(T_SERIAL)
    set(_serial RUN_SERIAL TRUE)
  endif()
  if(NOT T_GROUPS)
    set(T_GROUPS unit)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE specdec::specdec specdec_catch_main ${T_LIBS})
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  specdec_target_warnings(${T_NAME})
  # OPTIMIZED: keeps the build's optimization under the sanitizers.
  set(_optimized)
  if(T_OPTIMIZED)
    set(_optimized OPTIMIZED)
  endif()
  specdec_target_sanitize(${T_NAME} TEST ${_optimized})
  # -w NoTests: a CTest entry whose Catch2 filter matches no test case fails
  # instead of passing with nothing run (a ';' in a test name used to split
  # the name CTest passes back, and such tests silently never ran).
  set(_no_tests -w NoTests)
  foreach(group IN LISTS T_GROUPS)
    if(group STREQUAL "unit")
      catch_discover_tests(${T_NAME} TEST_SPEC "~[statistical]~[cuda]~[torch]" EXTRA_ARGS ${_no_tests}
                         PROPERTIES LABELS unit ${_serial})
    elseif(group STREQUAL "cuda")
      catch_discover_tests(${T_NAME} TEST_SPEC "[cuda]" TEST_PREFIX "cuda: " EXTRA_ARGS ${_no_tests}
                           PROPERTIES LABELS cuda SKIP_REGULAR_EXPRESSION "skipped: no CUDA device")
    else()
      catch_discover_tests(${T_NAME} TEST_SPEC "[${group}]" TEST_PREFIX "${group}: " EXTRA_ARGS ${_no_tests}
                           PROPERTIES LABELS ${group} ${_serial})
    endif()
  endforeach()
endfunction()

# specdec_add_bench(NAME name SOURCES a.cpp ... [LIBS lib ...])
function(specdec_add_bench)
  cmake_parse_arguments(B "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${B_NAME} ${B_SOURCES})
  target_link_libraries(${B_NAME} PRIVATE specdec::specdec benchmark::benchmark ${B_LIBS})
  specdec_target_warnings(${B_NAME})
endfunction()
