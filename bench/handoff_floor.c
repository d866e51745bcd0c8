/*
 * handoff_floor.c — the physical reference of bench/run.sh for small all_reduce: about the fastest
 * 2-rank float32 sum this machine allows, timed exactly as `pstate bench` and mpi_bench time
 * theirs, written with nothing but the unavoidable work in it.
 *
 *   handoff_floor [-b 8] [-e 1K] [-f 2] [--iters 20000] [--bind] [--json FILE]
 *
 * Why: the bar for all_reduce of 8 B..1 KiB is 0.8 x Open MPI's time. Both libraries move
 * the data the same way at these sizes (a cache line written by one core and read by the other),
 * so the question is whether 0.8 x MPI is below what any implementation can reach here. This
 * program answers it by measurement: two processes (fork) share an anonymous mapping; no library,
 * no argument checks, no dispatch, no failure detection, no sleeping; just
 *
 *   per timed call i (preceded, as in both benchmarks, by a barrier: each rank stores i into its
 *   own barrier line and spins until the peer's line holds i):
 *     t0 = now
 *     ll  : write my input into my slot (i % 16), 56 payload bytes per 64-byte line with the
 *           sequence number stored last in each line (data and flag arrive in one line transfer:
 *           NCCL's LL protocol, Open MPI's fast boxes); for every line of the peer's slot: spin
 *           until its sequence number is i, then add its floats to mine
 *     bulk: copy my input into my slot, then store i into the slot's flag (its own line); spin
 *           until the peer's flag is i, then add the peer's whole slot to mine (one flag miss,
 *           then the data lines stream in together: faster than ll from a few hundred bytes on)
 *     t1 = now
 *
 * and the same statistic: per call, the slowest rank's t1 - t0; per size, the median over calls;
 * both protocols are measured at every size and the faster one is the floor.
 * Results are checked (the peer's floats are known). With --bind rank r runs on CPU r (like
 * `pstate run --bind-cores` and `mpirun --bind-to core`); without it the kernel places them.
 * Output: a table on stdout; --json FILE: {"ranks": 2, "bind": true, "results": [{"bytes": 8,
 * "time_us": 0.10, "ll_us": 0.10, "bulk_us": 0.13, "wrong": 0}, ...]} (time_us = the faster).
 */
#define _GNU_SOURCE /* sched_setaffinity, MAP_ANONYMOUS */

#include "bench_common.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kLine = 64, kData = 56, kSlots = 16, kMaxBytes = 4096, kMaxLines = (kMaxBytes + kData - 1) / kData };

typedef struct {
  unsigned char data[kData];
  _Atomic uint64_t seq;
} line_t;

typedef struct {
  _Alignas(128) unsigned char data[kMaxBytes];
  _Alignas(128) _Atomic uint64_t flag;
} bulk_slot_t;

typedef struct {
  _Alignas(128) _Atomic uint64_t barrier; /* own 128-byte block: no false sharing, no pair prefetch */
  _Alignas(128) line_t slots[kSlots][kMaxLines];
  bulk_slot_t bulk[kSlots];
} rank_area_t;

typedef struct {
  rank_area_t rank[2];
  int wrong[2];
} shared_t;

static void spin_until(_Atomic uint64_t *word, uint64_t value) {
  while (atomic_load_explicit(word, memory_order_acquire) < value) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

/* Rank r's float k in call i: small integers, so every sum is exact whatever the order. */
static float input_value(int r, uint64_t i, size_t k) { return (float)((r + 1) * 3 + (int)((i + k) % 5)); }

/* One rank's side of `calls` timed calls of `bytes`; times[c] = this rank's time of call c. */
static void run_rank(shared_t *sh, int me, int bulk, size_t bytes, uint64_t first, int calls, double *times) {
  const int peer = 1 - me;
  const size_t floats = bytes / sizeof(float), lines = (bytes + kData - 1) / kData;
  float in[kMaxBytes / sizeof(float)], out[kMaxBytes / sizeof(float)];
  for (int c = 0; c < calls; ++c) {
    const uint64_t i = first + (uint64_t)c;
    for (size_t k = 0; k < floats; ++k) in[k] = input_value(me, i, k);
    atomic_store_explicit(&sh->rank[me].barrier, i, memory_order_release);
    spin_until(&sh->rank[peer].barrier, i);

    const double t0 = bench_now_us();
    if (bulk) {
      bulk_slot_t *mine = &sh->rank[me].bulk[i % kSlots], *theirs = &sh->rank[peer].bulk[i % kSlots];
      memcpy(mine->data, in, bytes);
      atomic_store_explicit(&mine->flag, i, memory_order_release);
      spin_until(&theirs->flag, i);
      const float *other = (const float *)(const void *)theirs->data;
      for (size_t k = 0; k < floats; ++k) out[k] = in[k] + other[k];
      times[c] = bench_now_us() - t0;
      goto check;
    }
    line_t *mine = sh->rank[me].slots[i % kSlots];
    line_t *theirs = sh->rank[peer].slots[i % kSlots];
    const unsigned char *src = (const unsigned char *)in;
    for (size_t l = 0; l < lines; ++l) {
      const size_t off = l * kData, n = bytes - off < kData ? bytes - off : kData;
      memcpy(mine[l].data, src + off, n);
      atomic_store_explicit(&mine[l].seq, i, memory_order_release);
    }
    memcpy(out, in, bytes);
    unsigned char *dst = (unsigned char *)out;
    for (size_t l = 0; l < lines; ++l) {
      const size_t off = l * kData, n = bytes - off < kData ? bytes - off : kData;
      spin_until(&theirs[l].seq, i);
      float tmp[kData / sizeof(float)];
      memcpy(tmp, theirs[l].data, n);
      for (size_t k = 0; k < n / sizeof(float); ++k) ((float *)(void *)(dst + off))[k] += tmp[k];
    }
    times[c] = bench_now_us() - t0;
  check:
    for (size_t k = 0; k < floats; ++k)
      if (out[k] != input_value(0, i, k) + input_value(1, i, k)) {
        sh->wrong[me]++;
        break;
      }
  }
}

static void bind_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) perror("handoff_floor: sched_setaffinity");
}

/* Median over `iters` calls of the slowest rank's time, for one protocol and size (forks rank 1). */
static double measure(shared_t *sh, double *times, double *slowest, int bind, int bulk, size_t bytes, uint64_t *next,
                      int warmup, int iters) {
  pid_t child = fork();
  if (child < 0) {
    perror("handoff_floor: fork");
    exit(1);
  }
  const int me = child == 0 ? 1 : 0;
  if (bind) bind_to(me);
  double *mine = times + (size_t)me * (size_t)iters;
  run_rank(sh, me, bulk, bytes, *next, warmup, mine);
  run_rank(sh, me, bulk, bytes, *next + (uint64_t)warmup, iters, mine);
  if (child == 0) _exit(0);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "handoff_floor: rank 1 failed\n");
    exit(1);
  }
  *next += (uint64_t)(warmup + iters);
  for (int c = 0; c < iters; ++c) slowest[c] = times[c] > times[iters + c] ? times[c] : times[iters + c];
  return bench_median(slowest, (size_t)iters);
}

static int usage(void) {
  fprintf(stderr, "usage: handoff_floor [-b 8] [-e 1K] [-f 2] [--iters 20000] [--bind] [--json FILE]\n");
  return 2;
}

int main(int argc, char **argv) {
  size_t lo = 8, hi = 1024;
  int factor = 2, iters = 20000, bind = 0;
  const char *json = NULL;
  for (int a = 1; a < argc; ++a) {
    const char *v = a + 1 < argc ? argv[a + 1] : NULL;
    if (strcmp(argv[a], "--bind") == 0) {
      bind = 1;
    } else if (v != NULL && strcmp(argv[a], "-b") == 0 && bench_parse_size(v, &lo) == 0) {
      ++a;
    } else if (v != NULL && strcmp(argv[a], "-e") == 0 && bench_parse_size(v, &hi) == 0) {
      ++a;
    } else if (v != NULL && strcmp(argv[a], "-f") == 0 && (factor = atoi(v)) >= 2) {
      ++a;
    } else if (v != NULL && strcmp(argv[a], "--iters") == 0 && (iters = atoi(v)) > 0) {
      ++a;
    } else if (v != NULL && strcmp(argv[a], "--json") == 0) {
      json = v;
      ++a;
    } else {
      return usage();
    }
  }
  if (lo < sizeof(float) || hi > kMaxBytes || lo > hi) {
    fprintf(stderr, "handoff_floor: sizes must lie in 4..%d bytes\n", kMaxBytes);
    return 2;
  }
  const int warmup = bench_default_warmup(iters);
  shared_t *sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  double *times = mmap(NULL, sizeof(double) * 2 * (size_t)iters, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  double *slowest = malloc(sizeof(double) * (size_t)iters);
  if (sh == MAP_FAILED || times == MAP_FAILED || slowest == NULL) {
    perror("handoff_floor: mmap");
    return 1;
  }
  memset(sh, 0, sizeof *sh);
  FILE *out = json != NULL ? fopen(json, "w") : NULL;
  if (json != NULL && out == NULL) {
    perror(json);
    return 1;
  }
  printf("# handoff_floor: 2 ranks, float32 sum, %s, median of the slowest rank per call\n",
         bind ? "rank r on CPU r" : "unbound");
  printf("# %12s %12s %12s %12s %10s\n", "bytes", "time_us", "ll_us", "bulk_us", "#wrong");
  if (out != NULL) fprintf(out, "{\"ranks\": 2, \"bind\": %s, \"results\": [", bind ? "true" : "false");

  uint64_t next = 1; /* the call number; never reused, so no slot needs resetting */
  int total_wrong = 0, first_row = 1;
  for (size_t bytes = lo; bytes <= hi; bytes *= (size_t)factor) {
    sh->wrong[0] = sh->wrong[1] = 0;
    const double ll = measure(sh, times, slowest, bind, 0, bytes, &next, warmup, iters);
    const double bulk = measure(sh, times, slowest, bind, 1, bytes, &next, warmup, iters);
    const double median = ll < bulk ? ll : bulk;
    const int wrong = sh->wrong[0] + sh->wrong[1];
    total_wrong += wrong;
    printf("  %12zu %12.3f %12.3f %12.3f %10d\n", bytes, median, ll, bulk, wrong);
    if (out != NULL)
      fprintf(out, "%s{\"bytes\": %zu, \"time_us\": %.4f, \"ll_us\": %.4f, \"bulk_us\": %.4f, \"wrong\": %d}",
              first_row ? "" : ", ", bytes, median, ll, bulk, wrong);
    first_row = 0;
    if (bytes > hi / (size_t)factor) break;
  }
  if (out != NULL) {
    fprintf(out, "]}\n");
    fclose(out);
  }
  return total_wrong == 0 ? 0 : 1;
}
