# cmake -P script: the README's quick start and then `cmake --install`, from a clean build
# directory, exactly as a new user runs them:
#
#   cmake --preset release && cmake --build --preset release --target specdec-cli
#   cmake --install build/release --prefix <dir>
#
# (in WORK_DIR/build instead of build/release, so that the developer's tree is untouched). The
# quick start builds the CLI only; with nvcc on PATH the package still offers specdec::cuda,
# which is then not built: the install must succeed anyway (it once failed on the missing
# libspecdec_cuda.a). Then the installed CLI runs the demo on the installed models and the
# consumer project builds against the installed package.
file(REMOVE_RECURSE ${WORK_DIR})
set(build ${WORK_DIR}/build)
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${REPO_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --preset release -B ${build})
run(${CMAKE_COMMAND} --build ${build} --target specdec-cli)
run(${CMAKE_COMMAND} --install ${build} --prefix ${prefix})
run(${prefix}/bin/specdec demo -n 8 --repeat 1)
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/consumer)
file(REMOVE_RECURSE ${WORK_DIR})  # a whole build: do not leave it behind
