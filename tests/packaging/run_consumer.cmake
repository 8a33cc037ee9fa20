# cmake -P script: install SPECDEC_BINARY_DIR into WORK_DIR/prefix, move it
# (relocatable), then configure, build and run the consumer project in
# CONSUMER_SOURCE_DIR against that prefix alone, once per component set:
#   - no COMPONENTS (every installed component);
#   - core and io, and cpu, with libtorch, oneDNN, OpenMP and CUDA made
#     unfindable: neither needs any of them;
#   - torch, and cuda, when the installed build has them;
#   - a component that does not exist, which must fail with its name;
# and, when the build has the Python package, `import specdec` from there
# (and specdec.ops, the PyTorch operators, where torch is installed).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${SPECDEC_BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
file(RENAME ${WORK_DIR}/prefix ${WORK_DIR}/moved-prefix)

# The Python package, when the build has it: importable from the moved prefix.
if(PYTHON)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${WORK_DIR}/moved-prefix/${PYTHON_SITE} ${PYTHON} -c
                          "import importlib.util, specdec, numpy; t = specdec.DraftTree.chain(0, [1]); print('python', specdec.__version__, t)\nif importlib.util.find_spec('torch'):\n import torch, specdec.ops; print('torch.ops.specdec', torch.ops.specdec.warp)"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("python: ${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "python: `import specdec` from the installed tree failed (${rc})")
  endif()
endif()

set(no_backends -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON
                -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)

# consumer(<name> <components> <uses> [extra configure args...])
function(consumer name components uses)
  set(build ${WORK_DIR}/build-${name})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR}
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/moved-prefix "-DCONSUMER_COMPONENTS=${components}"
                          -DCONSUMER_USES=${uses} ${ARGN}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configuring the consumer failed (${rc})")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: building the consumer failed (${rc})")
  endif()
  execute_process(COMMAND ${build}/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  message("${name}: ${out}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "specdec ok")
    message(FATAL_ERROR "${name}: the consumer ran but failed (${rc})")
  endif()
endfunction()

consumer(all "" core)
consumer(core-io "core;io" io ${no_backends})
consumer(cpu "cpu" cpu ${no_backends})
if(HAS_TORCH)
  consumer(torch "torch" torch)
endif()
if(HAS_CUDA)
  consumer(cuda "cuda" cuda -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON)
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build-missing -G ${GENERATOR}
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/moved-prefix -DCONSUMER_COMPONENTS=nonsense
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "without the nonsense component")
  message(FATAL_ERROR "asking for a component that does not exist configured, or did not name it:\n${out}${err}")
endif()
