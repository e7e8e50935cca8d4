# octet as another project's subproject (tests/subproject/CMakeLists.txt adds
# octet's tree with add_subdirectory and links octet::octet): configured, not
# built (building would compile the library a second time).
#   1. by default the parent gets the library, its tools and its own program,
#      and none of octet's tests, benchmarks or examples;
#   2. -DOCTET_BUILD_TESTS=ON still brings the tests.
# Inputs: OCTET_SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM.
function(configure_and_list dir out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${OCTET_SOURCE_DIR}/tests/subproject" -B "${dir}" -G "${GENERATOR}"
                          -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
                          -DOCTET_SOURCE_DIR=${OCTET_SOURCE_DIR} -DOCTET_CUDA=OFF ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the parent project failed (${rc}):\n${out}\n${err}")
  endif()
  if(GENERATOR MATCHES "Ninja")  # every target (Ninja's help lists only some)
    set(list_targets ${MAKE_PROGRAM} -C "${dir}" -t targets all)
  else()
    set(list_targets ${CMAKE_COMMAND} --build "${dir}" --target help)
  endif()
  execute_process(COMMAND ${list_targets} RESULT_VARIABLE rc OUTPUT_VARIABLE targets ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "listing the parent project's targets failed (${rc}): ${err}")
  endif()
  set(${out_var} "${targets}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
configure_and_list("${WORK_DIR}/default" targets)
foreach(wanted parent_program octet octet-device-info octet-run)
  if(NOT targets MATCHES "(^|[\n ])${wanted}[:\n ]")
    message(FATAL_ERROR "the parent project has no target ${wanted}:\n${targets}")
  endif()
endforeach()
string(REGEX MATCHALL "octet_[a-z0-9_]+_(test|bench)|train_gpt|sample_gpt" extra "${targets}")
if(extra)
  list(REMOVE_DUPLICATES extra)
  list(LENGTH extra n)
  list(SUBLIST extra 0 5 some)
  message(FATAL_ERROR "as a subproject octet still adds ${n} test, benchmark or example targets, e.g. ${some}")
endif()
message("subproject test: by default the parent gets the library, its tools and its own program only")

configure_and_list("${WORK_DIR}/with_tests" targets -DOCTET_BUILD_TESTS=ON)
if(NOT targets MATCHES "octet_core_tensor_test")
  message(FATAL_ERROR "-DOCTET_BUILD_TESTS=ON in the parent project brought no octet test targets")
endif()
message("subproject test: -DOCTET_BUILD_TESTS=ON still brings the tests")
