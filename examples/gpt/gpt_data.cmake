# The GPT example's data pipeline (examples/gpt/data.{h,cc}) and its resume
# decisions (examples/gpt/run_state.{h,cc}) as a static
# library, `gpt_data`. Included from examples/gpt/CMakeLists.txt and, when the
# tests are built, from tests/CMakeLists.txt (tests/examples link it) — which
# may happen first, or alone when OCTET_BUILD_EXAMPLES=OFF; the guard makes the
# second include a no-op.
include_guard(GLOBAL)
add_library(gpt_data STATIC ${CMAKE_CURRENT_LIST_DIR}/data.cc ${CMAKE_CURRENT_LIST_DIR}/run_state.cc)
target_link_libraries(gpt_data PUBLIC octet_internal absl::status absl::statusor absl::strings absl::str_format)
target_include_directories(gpt_data PUBLIC ${CMAKE_CURRENT_LIST_DIR}/../..)
target_compile_options(gpt_data PRIVATE -Wall -Wextra -Wno-unused-parameter)
