/*
 * all_to_all_v_bench.c — pstate_all_to_all_v against MPI_Alltoallv, the same program built twice:
 * against libpstate (ranks started by bench/all_to_all_v.sh with RANK/WORLD_SIZE/MASTER_* in the
 * environment, env:// init) and with -DBENCH_MPI by mpicc (ranks started by mpirun). Both use
 * bench_common.h's timing rule, so the two columns measure the same thing: every iteration is
 * timed alone between barriers, the per-iteration times are max-reduced across ranks (the slowest
 * rank's time), and the median over iterations is printed in microseconds.
 *
 * The exchange: float32, uneven per-pair counts: rank i sends weight(i, j) = 1 + (i + j) % 2 units
 * to rank j (itself included), packed in rank order on both sides; "bytes" is what rank 0 sends
 * in all (a size that does not divide into units is rounded down, at least one element a unit).
 * With --check the first and the last iteration's received data are compared with what each
 * sender wrote (element k of i's part for j is i * 1e6 + j * 1e3 + k mod 1e3), and a wrong
 * element makes rank 0 exit 1.
 *
 *   all_to_all_v_bench [-b 1K] [-e 4M] [-f 4] [--check]      (prints: bytes count time_us)
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_common.h"

#ifdef BENCH_MPI
#include <mpi.h>
#else
#include <pstate/pstate.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_n;
#ifndef BENCH_MPI
static pstate_t *g_ps;
static pstate_group_t *g_world;
#endif

static void die(const char *what, int code) {
  fprintf(stderr, "all_to_all_v_bench rank %d: %s (%d)", g_rank, what, code);
#ifndef BENCH_MPI
  fprintf(stderr, ": %s", pstate_last_error());
#endif
  fprintf(stderr, "\n");
  exit(1);
}

static void barrier(void) {
#ifdef BENCH_MPI
  MPI_Barrier(MPI_COMM_WORLD);
#else
  pstate_status_t s = pstate_barrier(g_world);
  if (s != PSTATE_OK) die("barrier", s);
#endif
}

static void max_reduce(double *v, size_t n) {
#ifdef BENCH_MPI
  MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#else
  pstate_status_t s = pstate_all_reduce(g_world, v, v, n, PSTATE_FLOAT64, PSTATE_MAX, NULL);
  if (s != PSTATE_OK) die("all_reduce", s);
#endif
}

static size_t weight(int i, int j) { return 1 + (size_t)((i + j) % 2); }

static float element(int i, int j, size_t k) { return (float)(i * 1000000 + j * 1000 + (int)(k % 1000)); }

int main(int argc, char **argv) {
  size_t min_bytes = 1024, max_bytes = 4u << 20, factor = 4;
  int check = 0;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--check") == 0) check = 1;
    else if (a + 1 < argc && strcmp(argv[a], "-b") == 0) bench_parse_size(argv[++a], &min_bytes);
    else if (a + 1 < argc && strcmp(argv[a], "-e") == 0) bench_parse_size(argv[++a], &max_bytes);
    else if (a + 1 < argc && strcmp(argv[a], "-f") == 0) factor = (size_t)atoi(argv[++a]);
    else {
      fprintf(stderr, "usage: all_to_all_v_bench [-b 1K] [-e 4M] [-f 4] [--check]\n");
      return 2;
    }
  }
#ifdef BENCH_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_n);
#else
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  pstate_status_t st = pstate_init(&params, &g_ps);
  if (st != PSTATE_OK) die("init", st);
  if ((st = pstate_get_group(g_ps, PSTATE_GROUP_WORLD, &g_world)) != PSTATE_OK) die("world", st);
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  if ((st = pstate_group_info(g_world, &info)) != PSTATE_OK) die("info", st);
  g_rank = info.rank_in_group;
  g_n = info.world_size;
#endif
  size_t w0 = 0;
  for (int j = 0; j < g_n; ++j) w0 += weight(0, j);
  if (g_rank == 0) printf("# %s all_to_all_v float32, %d ranks, parts 1 + (i + j) %% 2 units\n# %10s %10s %12s\n",
#ifdef BENCH_MPI
                          "MPI_Alltoallv",
#else
                          "pstate_all_to_all_v",
#endif
                          g_n, "bytes", "unit", "time_us");
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    size_t unit = bytes / sizeof(float) / w0;
    if (unit == 0) unit = 1;
    size_t sc[64], sd[64], rc[64], rd[64], s_total = 0, r_total = 0;
#ifdef BENCH_MPI
    int isc[64], isd[64], irc[64], ird[64];
#endif
    for (int j = 0; j < g_n; ++j) {
      sc[j] = unit * weight(g_rank, j), sd[j] = s_total, s_total += sc[j];
      rc[j] = unit * weight(j, g_rank), rd[j] = r_total, r_total += rc[j];
#ifdef BENCH_MPI
      isc[j] = (int)sc[j], isd[j] = (int)sd[j], irc[j] = (int)rc[j], ird[j] = (int)rd[j];
#endif
    }
    float *send = malloc(s_total * sizeof(float)), *recv = malloc(r_total * sizeof(float));
    if (send == NULL || recv == NULL) die("malloc", 0);
    for (int j = 0; j < g_n; ++j)
      for (size_t k = 0; k < sc[j]; ++k) send[sd[j] + k] = element(g_rank, j, k);
    const int iters = bench_default_iters(bytes), warmup = bench_default_warmup(iters);
    double *times = malloc(sizeof(double) * (size_t)iters);
    size_t wrong = 0;
    for (int it = -warmup; it < iters; ++it) {
      if (check) memset(recv, 0, r_total * sizeof(float));
      barrier();
      const double t0 = bench_now_us();
#ifdef BENCH_MPI
      MPI_Alltoallv(send, isc, isd, MPI_FLOAT, recv, irc, ird, MPI_FLOAT, MPI_COMM_WORLD);
#else
      st = pstate_all_to_all_v(g_world, send, sc, sd, recv, rc, rd, PSTATE_FLOAT32, NULL);
      if (st != PSTATE_OK) die("all_to_all_v", st);
#endif
      const double t1 = bench_now_us();
      if (it >= 0) times[it] = t1 - t0;
      if (check && (it == -warmup || it == iters - 1))
        for (int i = 0; i < g_n; ++i)
          for (size_t k = 0; k < rc[i]; ++k) wrong += recv[rd[i] + k] != element(i, g_rank, k);
    }
    max_reduce(times, (size_t)iters);
    double bad = (double)wrong;
    max_reduce(&bad, 1);
    if (g_rank == 0) {
      printf("  %10zu %10zu %12.2f%s\n", unit * w0 * sizeof(float), unit, bench_median(times, (size_t)iters),
             bad > 0 ? "  WRONG" : "");
      fflush(stdout);
      if (bad > 0) return 1;
    }
    free(times);
    free(send);
    free(recv);
  }
#ifdef BENCH_MPI
  MPI_Finalize();
#else
  pstate_finalize(g_ps);
#endif
  return 0;
}
