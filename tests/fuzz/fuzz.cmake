# tests/fuzz/fuzz.cmake: beside the fuzz targets and the corpus it replays; tests/CMakeLists.txt
# includes it.
#
# fuzz.cmake — replays the committed fuzz corpus (tests/fuzz/corpus/<target>) through each fuzz
# target with a plain main() (tests/fuzz/replay_main.cpp), so every build — g++, and the
# ASan/UBSan build of .ci/sanitizers.sh — rechecks every input the fuzzers ever kept. Fuzzing
# itself (clang, libFuzzer) is tests/fuzz/fuzz.sh.
foreach(target wire init_method launch_env layout)
  add_executable(fuzz_replay_${target} ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_${target}.cpp
                                       ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.cpp)
  target_include_directories(fuzz_replay_${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/fuzz)
  target_compile_options(fuzz_replay_${target} PRIVATE ${PSTATE_WARNINGS})
  target_link_libraries(fuzz_replay_${target} PRIVATE pstate_internal)
  add_test(NAME fuzz_replay_${target}
           COMMAND fuzz_replay_${target} ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${target})
  set_tests_properties(fuzz_replay_${target} PROPERTIES TIMEOUT 120)
endforeach()
