/*
 * bench_common.h — what `pstate bench` (src/cli/cli_bench.cpp) and its Open MPI twin
 * (bench/mpi_bench.c) share, so that both measure the same thing the same way: the operation
 * names, the size sweep and how a size becomes an element count, the default number of
 * iterations, the nccl-tests bus-bandwidth factors, the crafted inputs of --check and their
 * expected results, the median, and the printed table and JSON.
 *
 * Plain C99 that also compiles as C++ (static inline functions, no globals), so the MPI program
 * needs no pstate library and the CLI needs no C translation unit. Nothing here talks to a
 * communicator: each program runs the operations with its own library.
 *
 * Conventions (those of nccl-tests):
 *   - "bytes" is the size of the whole buffer an operation is about: the all_reduce buffer, the
 *     all_gather output, the reduce_scatter input, the broadcast buffer, the all_to_all input,
 *     the message of send_recv, the object of broadcast_object, the all_gatherv output, the
 *     message each rank sends in sendrecv. A size that does not divide into ranks x element
 *     size is rounded down (at least one element per rank).
 *   - all_gatherv's parts are uneven: rank r's part has weight 1 + r % 2 (1, 2, 1, 2, ...), so a
 *     size is cut into units of sum(weights) and "count" is the elements of one unit (rank 0's part).
 *   - sendrecv is a ring: every rank sends its message to rank r + 1 and receives one from rank
 *     r - 1 at once (non-blocking send and receive, then a wait for both); the time is that of the
 *     whole exchange.
 *   - algbw = bytes / time; busbw = algbw x factor (all_reduce 2(n-1)/n; all_gather,
 *     reduce_scatter and all_to_all (n-1)/n; broadcast, send_recv, broadcast_object 1).
 *   - time: every rank times each iteration alone (iterations separated by a barrier); the
 *     per-iteration times are max-reduced across ranks (the slowest rank's time) and the median
 *     over iterations is reported, in microseconds.
 */
#ifndef PSTATE_CLI_BENCH_COMMON_H
#define PSTATE_CLI_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NULL in C, nullptr in C++ (this header is both). */
#ifdef __cplusplus
#define BENCH_NULL nullptr
#else
#define BENCH_NULL NULL
#endif

/* ------------------------------------------------------------------------------------------ */
/* Operations                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef enum bench_op_t {
  BENCH_ALL_REDUCE = 0,
  BENCH_ALL_GATHER,
  BENCH_REDUCE_SCATTER,
  BENCH_BROADCAST,
  BENCH_ALL_TO_ALL,
  BENCH_SEND_RECV,
  BENCH_BROADCAST_OBJECT,
  BENCH_ALL_GATHERV,
  BENCH_SENDRECV_RING,
  BENCH_STARTUP, /* no sweep: start, initialize, finalize (timed from outside, whole process) */
  BENCH_OP_COUNT
} bench_op_t;

static inline const char *bench_op_name(bench_op_t op) {
  static const char *const names[BENCH_OP_COUNT] = {
      "all_reduce", "all_gather",       "reduce_scatter", "broadcast", "all_to_all",
      "send_recv",  "broadcast_object", "all_gatherv",    "sendrecv",  "startup"};
  return (int)op >= 0 && op < BENCH_OP_COUNT ? names[op] : BENCH_NULL;
}

/* Returns the op named `name`, or -1. */
static inline int bench_op_from_name(const char *name) {
  int op;
  for (op = 0; op < BENCH_OP_COUNT; ++op)
    if (strcmp(name, bench_op_name((bench_op_t)op)) == 0) return op;
  return -1;
}

/* Whether the op reduces (its results depend on the element type and the reduction). */
static inline int bench_op_reduces(bench_op_t op) {
  return op == BENCH_ALL_REDUCE || op == BENCH_REDUCE_SCATTER;
}

/* Whether `bytes` is split into one block per rank (so a count is per rank). */
static inline int bench_op_blocks_per_rank(bench_op_t op) {
  return op == BENCH_ALL_GATHER || op == BENCH_REDUCE_SCATTER || op == BENCH_ALL_TO_ALL;
}

/* all_gatherv: the weight of rank r's part, and the weights' sum over n ranks. */
static inline size_t bench_gatherv_weight(int rank) {
  return 1 + (size_t)(rank % 2);
}
static inline size_t bench_gatherv_weights(int n) {
  size_t w = 0;
  int r;
  for (r = 0; r < n; ++r) w += bench_gatherv_weight(r);
  return w;
}
/* all_gatherv: the first element of rank r's part, for a unit of `count` elements. */
static inline size_t bench_gatherv_offset(int rank, size_t count) {
  size_t off = 0;
  int r;
  for (r = 0; r < rank; ++r) off += bench_gatherv_weight(r) * count;
  return off;
}

/* nccl-tests' busbw / algbw for an op on n ranks. */
static inline double bench_busbw_factor(bench_op_t op, int n) {
  switch (op) {
    case BENCH_ALL_REDUCE:
      return n > 1 ? 2.0 * (n - 1) / n : 0.0;
    case BENCH_ALL_GATHER:
    case BENCH_ALL_GATHERV:
    case BENCH_REDUCE_SCATTER:
    case BENCH_ALL_TO_ALL:
      return n > 1 ? (double)(n - 1) / n : 0.0;
    default:
      return 1.0;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Element types (the order and names of pstate_dtype_t, which are NCCL's)                      */
/* ------------------------------------------------------------------------------------------ */

enum {
  BENCH_INT8 = 0,
  BENCH_UINT8,
  BENCH_INT32,
  BENCH_UINT32,
  BENCH_INT64,
  BENCH_UINT64,
  BENCH_FLOAT16,
  BENCH_FLOAT32,
  BENCH_FLOAT64,
  BENCH_BFLOAT16,
  BENCH_FP8_E4M3,
  BENCH_FP8_E5M2,
  BENCH_DTYPE_COUNT
};

static inline const char *bench_dtype_name(int dtype) {
  static const char *const names[BENCH_DTYPE_COUNT] = {"int8",    "uint8",    "int32",    "uint32",
                                                       "int64",   "uint64",   "float16",  "float32",
                                                       "float64", "bfloat16", "fp8_e4m3", "fp8_e5m2"};
  return dtype >= 0 && dtype < BENCH_DTYPE_COUNT ? names[dtype] : BENCH_NULL;
}

static inline int bench_dtype_from_name(const char *name) {
  int d;
  for (d = 0; d < BENCH_DTYPE_COUNT; ++d)
    if (strcmp(name, bench_dtype_name(d)) == 0) return d;
  return -1;
}

static inline size_t bench_dtype_size(int dtype) {
  static const size_t sizes[BENCH_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return dtype >= 0 && dtype < BENCH_DTYPE_COUNT ? sizes[dtype] : 0;
}

/* Reductions --check can predict exactly (names and numbers of pstate_reduce_op_t). */
enum { BENCH_SUM = 0, BENCH_MAX = 2, BENCH_MIN = 3 };

static inline int bench_redop_from_name(const char *name) {
  if (strcmp(name, "sum") == 0) return BENCH_SUM;
  if (strcmp(name, "max") == 0) return BENCH_MAX;
  if (strcmp(name, "min") == 0) return BENCH_MIN;
  return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Sizes and iterations                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* "8", "64K", "64KiB", "16M", "1G" (powers of 1024) -> *out. Returns 0, or -1 for bad text. */
static inline int bench_parse_size(const char *text, size_t *out) {
  char *end = BENCH_NULL;
  unsigned long long v;
  if (text == BENCH_NULL || *text < '0' || *text > '9') return -1;
  v = strtoull(text, &end, 10);
  switch (*end) {
    case 'k':
    case 'K':
      v <<= 10;
      ++end;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      ++end;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'i' && end[1] == 'B')
    end += 2;
  else if (*end == 'B')
    ++end;
  if (*end != '\0') return -1;
  *out = (size_t)v;
  return 0;
}

/* Elements per rank block (ops that split the buffer) or in the buffer (the others); >= 1. */
static inline size_t bench_count_for(bench_op_t op, size_t bytes, size_t elem, int n) {
  size_t count = bytes / elem;
  if (bench_op_blocks_per_rank(op)) count /= (size_t)n;
  if (op == BENCH_ALL_GATHERV) count /= bench_gatherv_weights(n);
  return count > 0 ? count : 1;
}

/* The bytes an op on `count` elements is about (see the conventions above). */
static inline size_t bench_bytes_for(bench_op_t op, size_t count, size_t elem, int n) {
  if (op == BENCH_ALL_GATHERV) return count * elem * bench_gatherv_weights(n);
  return count * elem * (bench_op_blocks_per_rank(op) ? (size_t)n : 1);
}

/* Default timed iterations: enough for a stable median at small sizes, bounded time at large. */
static inline int bench_default_iters(size_t bytes) {
  size_t budget = (size_t)256 << 20; /* about 256 MiB moved per size */
  size_t iters = bytes > 0 ? budget / bytes : 1000;
  if (iters > 1000) iters = 1000;
  if (iters < 20) iters = 20;
  return (int)iters;
}

static inline int bench_default_warmup(int iters) {
  return iters / 10 > 2 ? iters / 10 : 2;
}

/* ------------------------------------------------------------------------------------------ */
/* Timing and statistics                                                                        */
/* ------------------------------------------------------------------------------------------ */

static inline double bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int bench_compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, size_t n) {
  if (n == 0) return 0.0;
  qsort(v, n, sizeof *v, bench_compare_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------------------------------------ */
/* --check: crafted inputs with exactly predictable results                                    */
/*                                                                                              */
/* Moving ops (gather, broadcast, all_to_all, send_recv, objects) carry bytes: rank r's byte i  */
/* is bench_pattern_byte(r, i), which differs between ranks and along the buffer, so a block   */
/* from the wrong rank or at the wrong offset is caught. Reducing ops carry small integers      */
/* 1..3 (bench_value) that every dtype holds exactly, and so do their sums for up to 32 ranks   */
/* (int8's 127 being the smallest bound), whatever the order of the additions.                 */
/* ------------------------------------------------------------------------------------------ */

static inline unsigned char bench_pattern_byte(int rank, size_t i) {
  uint32_t x = (uint32_t)rank * 2654435761u + (uint32_t)i * 40503u + (uint32_t)(i >> 16) * 97u;
  return (unsigned char)(x >> 11 ^ x);
}

static inline void bench_fill_pattern(unsigned char *buf, size_t n, int rank, size_t first_index) {
  size_t i;
  for (i = 0; i < n; ++i) buf[i] = bench_pattern_byte(rank, first_index + i);
}

/* Number of bytes of buf[0..n) that differ from rank's pattern starting at first_index. */
static inline size_t bench_count_pattern_wrong(const unsigned char *buf, size_t n, int rank, size_t first_index) {
  size_t i, wrong = 0;
  for (i = 0; i < n; ++i) wrong += buf[i] != bench_pattern_byte(rank, first_index + i);
  return wrong;
}

/* Rank r's element i of a reduction input. */
static inline int bench_value(int rank, size_t i) {
  return 1 + (int)(((size_t)rank + i) % 3);
}

/* The reduction over ranks 0..n-1 of bench_value(r, i). */
static inline int bench_expected(int redop, int n, size_t i) {
  int r, acc = bench_value(0, i);
  for (r = 1; r < n; ++r) {
    int v = bench_value(r, i);
    if (redop == BENCH_SUM)
      acc += v;
    else if (redop == BENCH_MAX)
      acc = v > acc ? v : acc;
    else
      acc = v < acc ? v : acc;
  }
  return acc;
}

/* IEEE half bits of a small non-negative integer v (< 2048: exact). */
static inline uint16_t bench_half_bits(int v) {
  int e = 0;
  if (v == 0) return 0;
  while ((v >> (e + 1)) != 0) ++e;
  return (uint16_t)(((e + 15) << 10) | (((v - (1 << e)) << (10 - e)) & 0x3ff));
}

/* Writes the small non-negative integer v as one element of dtype at dst. Returns 0, or -1 for
 * a dtype that cannot be reduced (fp8). */
static inline int bench_encode(int dtype, int v, void *dst) {
  switch (dtype) {
    case BENCH_INT8: {
      int8_t x = (int8_t)v;
      memcpy(dst, &x, 1);
      return 0;
    }
    case BENCH_UINT8: {
      uint8_t x = (uint8_t)v;
      memcpy(dst, &x, 1);
      return 0;
    }
    case BENCH_INT32: {
      int32_t x = v;
      memcpy(dst, &x, 4);
      return 0;
    }
    case BENCH_UINT32: {
      uint32_t x = (uint32_t)v;
      memcpy(dst, &x, 4);
      return 0;
    }
    case BENCH_INT64: {
      int64_t x = v;
      memcpy(dst, &x, 8);
      return 0;
    }
    case BENCH_UINT64: {
      uint64_t x = (uint64_t)v;
      memcpy(dst, &x, 8);
      return 0;
    }
    case BENCH_FLOAT16: {
      uint16_t x = bench_half_bits(v);
      memcpy(dst, &x, 2);
      return 0;
    }
    case BENCH_FLOAT32: {
      float x = (float)v;
      memcpy(dst, &x, 4);
      return 0;
    }
    case BENCH_FLOAT64: {
      double x = v;
      memcpy(dst, &x, 8);
      return 0;
    }
    case BENCH_BFLOAT16: {
      float f = (float)v;
      uint32_t bits;
      uint16_t x;
      memcpy(&bits, &f, 4);
      x = (uint16_t)(bits >> 16); /* exact: small integers have at most 8 significant bits */
      memcpy(dst, &x, 2);
      return 0;
    }
    default:
      return -1;
  }
}

/* Fills count elements of a reduction input: element j is bench_value(rank, first_index + j). */
static inline void bench_fill_values(unsigned char *buf, size_t count, int dtype, int rank, size_t first_index) {
  size_t j, elem = bench_dtype_size(dtype);
  for (j = 0; j < count; ++j) bench_encode(dtype, bench_value(rank, first_index + j), buf + j * elem);
}

/* Elements of buf[0..count) that differ (bitwise) from the reduction's exact result. */
static inline size_t bench_count_reduce_wrong(const unsigned char *buf, size_t count, int dtype, int redop, int n,
                                              size_t first_index) {
  size_t j, wrong = 0, elem = bench_dtype_size(dtype);
  unsigned char want[8];
  for (j = 0; j < count; ++j) {
    bench_encode(dtype, bench_expected(redop, n, first_index + j), want);
    wrong += memcmp(buf + j * elem, want, elem) != 0;
  }
  return wrong;
}

/* ------------------------------------------------------------------------------------------ */
/* Results: the table on stdout and the JSON file                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct bench_result_t {
  size_t bytes;
  size_t count; /* elements per rank block (as bench_count_for) */
  double time_us;
  double algbw_gbs;
  double busbw_gbs;
  long wrong; /* elements (bytes for moving ops) found wrong by --check; 0 without --check */
} bench_result_t;

static inline bench_result_t bench_make_result(bench_op_t op, size_t bytes, size_t count, int n, double time_us,
                                               long wrong) {
  bench_result_t r;
  r.bytes = bytes;
  r.count = count;
  r.time_us = time_us;
  r.algbw_gbs = time_us > 0 ? (double)bytes / (time_us * 1e3) : 0.0; /* bytes/us/1e3 = GB/s */
  r.busbw_gbs = r.algbw_gbs * bench_busbw_factor(op, n);
  r.wrong = wrong;
  return r;
}

static inline void bench_print_header(FILE *out, const char *who, bench_op_t op, const char *dtype, const char *redop,
                                      int ranks, int check) {
  fprintf(out, "# %s: %s %s%s%s, %d ranks, median of the slowest rank per iteration%s\n", who, bench_op_name(op), dtype,
          bench_op_reduces(op) ? " " : "", bench_op_reduces(op) ? redop : "", ranks, check ? ", --check" : "");
  fprintf(out, "# %12s %12s %12s %12s %12s %8s\n", "bytes", "count", "time_us", "algbw_GB/s", "busbw_GB/s", "#wrong");
}

static inline void bench_print_row(FILE *out, const bench_result_t *r, int check) {
  char wrong[32];
  if (check)
    snprintf(wrong, sizeof wrong, "%ld", r->wrong);
  else
    snprintf(wrong, sizeof wrong, "-");
  fprintf(out, "  %12zu %12zu %12.2f %12.3f %12.3f %8s\n", r->bytes, r->count, r->time_us, r->algbw_gbs, r->busbw_gbs,
          wrong);
  fflush(out);
}

/* Writes {"op": ..., "dtype": ..., "ranks": n, "results": [...]} to path. Returns 0 or -1. */
static inline int bench_write_json(const char *path, bench_op_t op, const char *dtype, int ranks,
                                   const bench_result_t *results, size_t n) {
  size_t i;
  int ok;
  FILE *f = fopen(path, "w");
  if (f == BENCH_NULL) return -1;
  fprintf(f, "{\"op\": \"%s\", \"dtype\": \"%s\", \"ranks\": %d, \"results\": [", bench_op_name(op), dtype, ranks);
  for (i = 0; i < n; ++i)
    fprintf(f, "%s\n  {\"bytes\": %zu, \"time_us\": %.3f, \"algbw_gbs\": %.4f, \"busbw_gbs\": %.4f, \"wrong\": %ld}",
            i ? "," : "", results[i].bytes, results[i].time_us, results[i].algbw_gbs, results[i].busbw_gbs,
            results[i].wrong);
  fprintf(f, "\n]}\n");
  ok = ferror(f) == 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

#endif /* PSTATE_CLI_BENCH_COMMON_H */
