# tests/bench/bench.cmake: beside its driver bench_check.py (the benchmarks themselves are in
# bench/, which holds no test); tests/CMakeLists.txt includes it.
#
# bench — `pstate bench --check` on small sizes, correctness only (benchmarks are not timed
# tests): every op on 2 ranks under `pstate run`, the ops that cut buffers per rank on 3 ranks,
# other element types and reductions, a tp x pp layout, start-up, usage errors; and
# bench/mpi_bench.c the same way over Open MPI when mpicc and mpirun exist. The driver,
# bench_check.py, checks exit statuses and the exact JSON shape; every run is time-bounded.
find_program(PSTATE_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
find_program(PSTATE_PYTHON3 python3)
if(NOT PSTATE_PYTHON3)
  message(WARNING "python3 not found: the bench tests are not declared")
  return()
endif()

set(_bench_driver ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/bench_check.py)
set(_bench_small -b 8 -e 256K -f 16 --iters 3 --warmup 1)
set(_bench_tests)

# bench_add(NAME MODE ARGS...): one test running the driver on the pstate command.
function(bench_add name)
  add_test(NAME bench_${name} COMMAND ${_bench_driver} $<TARGET_FILE:pstate_cli> ${ARGN})
  set(_bench_tests ${_bench_tests} bench_${name} PARENT_SCOPE)
endfunction()

foreach(op IN ITEMS all_reduce all_gather reduce_scatter broadcast all_to_all send_recv broadcast_object)
  bench_add(check_${op}_2_ranks op ${op} 2 ${_bench_small})
endforeach()
foreach(op IN ITEMS all_gather reduce_scatter all_to_all send_recv broadcast_object)
  bench_add(check_${op}_3_ranks op ${op} 3 ${_bench_small})
endforeach()
bench_add(check_all_reduce_bfloat16_max op all_reduce 2 --dtype bfloat16 --redop max ${_bench_small})
bench_add(check_all_reduce_float16_sum op all_reduce 3 --dtype float16 ${_bench_small})
bench_add(check_reduce_scatter_int8_min op reduce_scatter 2 --dtype int8 --redop min ${_bench_small})
bench_add(check_all_gather_fp8_moves op all_gather 2 --dtype fp8_e4m3 ${_bench_small})
bench_add(check_all_reduce_tp_group_of_tp2_pp2 op all_reduce 4 --tp 2 --pp 2 --group tp ${_bench_small})
bench_add(check_broadcast_pp_group_of_tp2_pp2 op broadcast 4 --tp 2 --pp 2 --group pp ${_bench_small})
bench_add(startup_tp2_pp2 startup 4 --tp 2 --pp 2)
bench_add(usage_errors usage)
set_tests_properties(${_bench_tests} PROPERTIES TIMEOUT 180 ENVIRONMENT "PSTATE_TIMEOUT_MS=60000")

find_program(PSTATE_MPICC mpicc)
find_program(PSTATE_MPIRUN mpirun)
if(PSTATE_MPICC AND PSTATE_MPIRUN)
  foreach(op IN ITEMS all_reduce all_gather reduce_scatter broadcast all_to_all send_recv broadcast_object)
    add_test(NAME bench_mpi_check_${op} COMMAND ${_bench_driver} ${PSTATE_MPICC} mpi ${PROJECT_SOURCE_DIR} ${op})
    set_tests_properties(bench_mpi_check_${op} PROPERTIES TIMEOUT 180)
  endforeach()
else()
  message(STATUS "pstate: mpicc/mpirun not found, bench_mpi_check_* tests are not declared")
endif()
