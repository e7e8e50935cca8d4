# Installs the build tree into a scratch prefix, then checks what a user of the
# installed package sees:
#   1. every installed header includes only headers that are installed too
#      (no private header leaks into the public surface), and none includes
#      or names Abseil (the public API reports errors as octet::Error);
#   2. liboctet.so exports no symbol of the backends' internal namespaces;
#   3. the installed octet-device-info and octet-run (two ranks of sh) run from
#      the prefix with no loader path;
#   4. a consumer (tests/install: its own core/tensor.h, <octet/...> only)
#      configures with find_package(octet), builds and runs;
#   5. every installed header compiles alone (self-contained) and without a
#      warning under -Wall -Wextra -Wpedantic -Wshadow -Wconversion
#      -Wsign-conversion -Werror (tests/install/headers), with the default
#      compiler and, where it is installed, with clang++ too.
#   6. the consumer builds with nothing but the compiler and the flags of the
#      installed octet.pc (pkg-config; NOTE [pkg-config file] in
#      CMakeLists.txt), found from the scratch prefix, not the configured one,
#      and runs with no loader path;
#   7. every installed header, compiled as C++17, stops at one error: octet's
#      own "needs C++20" (octet/core/cxx20.h), not errors inside octet;
#   8. every inline function of every installed header links against the
#      installed liboctet.so alone: what the inline code calls is exported.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${OCTET_BINARY_DIR}" --prefix "${prefix}")

# 1. The public surface is closed under #include.
file(GLOB_RECURSE headers RELATIVE "${prefix}/include" "${prefix}/include/octet/*.h")
list(LENGTH headers n_headers)
if(n_headers LESS 20)
  message(FATAL_ERROR "only ${n_headers} headers installed under ${prefix}/include/octet")
endif()
set(problems "")
foreach(h ${headers})
  file(STRINGS "${prefix}/include/${h}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${lines})
    if(line MATCHES "#[ \t]*include[ \t]*[<\"](octet/[^>\"]+)[>\"]")
      if(NOT EXISTS "${prefix}/include/${CMAKE_MATCH_1}")
        string(APPEND problems "  ${h} includes ${CMAKE_MATCH_1}, which is not installed (private)\n")
      endif()
    elseif(line MATCHES "#[ \t]*include[ \t]*\"((core|ops|autograd|nn|optim|distributed)/[^\"]+)\"")
      string(APPEND problems "  ${h} includes \"${CMAKE_MATCH_1}\" (octet's headers are included as <octet/...>)\n")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "installed headers reach outside the public surface:\n${problems}")
endif()
message("install test: ${n_headers} installed headers include only installed headers")

# No Abseil in the public surface: no #include of it, no absl:: anywhere
# (comments included: they document the API).
foreach(h ${headers})
  # One list element per line (empty lines kept, for the line numbers):
  # the characters CMake's lists treat specially are replaced first.
  file(READ "${prefix}/include/${h}" text)
  string(REPLACE "\\" "/" text "${text}")
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    if(line MATCHES "#[ \t]*include[ \t]*[<\"]absl/" OR line MATCHES "absl::")
      string(STRIP "${line}" line)
      string(APPEND problems "  ${h}:${line_no}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "installed headers use Abseil (the public API must not):\n${problems}")
endif()
message("install test: no installed header uses Abseil")

# 2. Hidden internals.
file(GLOB libs "${prefix}/lib*/liboctet.so")
if(libs)
  list(GET libs 0 lib)
  find_program(NM nm REQUIRED)
  execute_process(COMMAND ${NM} -DC --defined-only "${lib}" OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${lib}")
  endif()
  # octet::internal::ThrowError is the one exception: the public headers'
  # inline checks (OCTET_CHECK) call it, so the version script exports it.
  string(REGEX REPLACE "[^\n]*octet::internal::ThrowError\\(char const\\*, int, [^\n]*" "" syms_checked "${syms}")
  string(REGEX MATCHALL "[^\n]*octet::(cpu|detail|internal|flash|convert_internal)::[^\n]*" leaked "${syms_checked}")
  string(REGEX MATCHALL "[^\n]* [TWV] (absl|nlohmann|dnnl|gloo)::[^\n]*" leaked3 "${syms}")
  list(APPEND leaked ${leaked3})
  if(leaked)
    list(LENGTH leaked n_leaked)
    list(SUBLIST leaked 0 5 some)
    string(REPLACE ";" "\n  " some "${some}")
    message(FATAL_ERROR "${lib} exports ${n_leaked} internal symbols, e.g.\n  ${some}")
  endif()
  string(REGEX MATCHALL "\n[0-9a-f]+ [TWVu] octet::Tensor::" api "${syms}")
  if(NOT api)
    message(FATAL_ERROR "${lib} exports no octet::Tensor members: the version script hides the API")
  endif()
  message("install test: ${lib} exports the API and no internal namespace")
endif()

# 3. Installed programs start from the prefix, with no loader path set.
run(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH "${prefix}/bin/octet-device-info")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH "${prefix}/bin/octet-run" -n 2 -- sh -c
                        "echo rank=\$OCTET_RANK of \$OCTET_WORLD_SIZE"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "\\[rank 0\\] rank=0 of 2" OR NOT out MATCHES "\\[rank 1\\] rank=1 of 2")
  message(FATAL_ERROR "the installed octet-run did not start two ranks (${rc}):\n${out}\n${err}")
endif()

# 4. The consumer.
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/build" -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")

# 5. The headers, each alone, warning-free.
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}/headers" -B "${WORK_DIR}/headers" -DCMAKE_PREFIX_PATH=${prefix}
    -DOCTET_INCLUDE_DIR=${prefix}/include -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/headers" --parallel)
find_program(CLANGXX clang++)
if(CLANGXX)
  run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}/headers" -B "${WORK_DIR}/headers-clang"
      -DCMAKE_PREFIX_PATH=${prefix} -DOCTET_INCLUDE_DIR=${prefix}/include -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CXX_COMPILER=${CLANGXX})
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/headers-clang" --parallel)
  message("install test: every installed header compiles alone, warning-free, with the default compiler and ${CLANGXX}")
else()
  message("install test: every installed header compiles alone, warning-free (no clang++ here to try too)")
endif()

# 6. pkg-config alone: the flags of the installed octet.pc and the compiler.
find_program(PKG_CONFIG NAMES pkgconf pkg-config REQUIRED)
file(GLOB_RECURSE pc_files "${prefix}/*/pkgconfig/octet.pc")
list(LENGTH pc_files n_pc)
if(NOT n_pc EQUAL 1)
  message(FATAL_ERROR "expected one installed octet.pc under ${prefix}, found ${n_pc}: ${pc_files}")
endif()
get_filename_component(pc_dir "${pc_files}" DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG} --cflags --libs octet
                RESULT_VARIABLE rc OUTPUT_VARIABLE pc_flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PKG_CONFIG} --cflags --libs octet failed (${rc}): ${err}")
endif()
message("install test: pkg-config --cflags --libs octet: ${pc_flags}")
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run(${CXX_COMPILER} -std=c++20 -O1 -I${CONSUMER_SOURCE_DIR} ${CONSUMER_SOURCE_DIR}/main.cc ${pc_flags}
    -o ${WORK_DIR}/pkg_config_consumer)
run(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH "${WORK_DIR}/pkg_config_consumer")
message("install test: a consumer built with pkg-config's flags alone runs")

# 7. Compiled as C++17, each installed header stops at octet's own message.
set(problems "")
foreach(h ${headers})
  file(WRITE "${WORK_DIR}/cxx17.cc" "#include <${h}>\n")
  execute_process(COMMAND ${CXX_COMPILER} -std=c++17 -Wfatal-errors -fsyntax-only -I${prefix}/include
                          "${WORK_DIR}/cxx17.cc"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    string(APPEND problems "  ${h}: compiled as C++17 without an error\n")
  elseif(NOT err MATCHES "octet's headers need C\\+\\+20: compile with -std=c\\+\\+20 or later")
    string(REGEX MATCH "[^\n]*error[^\n]*" first "${err}")
    string(APPEND problems "  ${h}: ${first}\n")
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "installed headers compiled as C++17 do not stop at octet's C++20 message first:\n${problems}")
endif()
message("install test: every installed header, compiled as C++17, stops at octet's C++20 message")

# 8. The inline code of the public headers links against the exported API:
# one program including every installed header, its inline functions all
# emitted (-fkeep-inline-functions, GCC's) whether called or not, linked
# against the installed liboctet.so. An inline function that calls a hidden
# symbol (Tensor::dim()'s check once called octet::internal::ThrowError,
# which the version script hid) fails here with the symbol's name.
execute_process(COMMAND ${CXX_COMPILER} --version OUTPUT_VARIABLE cxx_version)
if(cxx_version MATCHES "(GCC|g\\+\\+|Free Software Foundation)")
  set(all "")
  foreach(h ${headers})
    string(APPEND all "#include <${h}>\n")
  endforeach()
  file(WRITE "${WORK_DIR}/all_inline.cc" "${all}int main() { return 0; }\n")
  execute_process(COMMAND ${CXX_COMPILER} -std=c++20 -O1 -fkeep-inline-functions -I${prefix}/include
                          "${WORK_DIR}/all_inline.cc" -L${prefix}/lib -L${prefix}/lib64 -loctet
                          -o "${WORK_DIR}/all_inline"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REGEX MATCHALL "undefined reference to [^\n]*" undefined "${err}")
    list(REMOVE_DUPLICATES undefined)
    string(REPLACE ";" "\n  " undefined "${undefined}")
    message(FATAL_ERROR "the installed headers' inline code does not link against liboctet.so:\n  ${undefined}\n${err}")
  endif()
  message("install test: the inline code of all ${n_headers} installed headers links against liboctet.so")
else()
  message("install test: check 8 needs GCC's -fkeep-inline-functions; ${CXX_COMPILER} is not GCC, skipped")
endif()

