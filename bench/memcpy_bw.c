/*
 * memcpy_bw.c — the physical reference of bench/run.sh: how fast one core copies a buffer with
 * memcpy (the "single-core memcpy bandwidth" the all_reduce 64 MiB target is a fraction of).
 *
 *   memcpy_bw [-s 64M] [--iters 30] [--json FILE]
 *
 * Copies SIZE bytes from one page-aligned, pre-faulted buffer to another, `iters` times after
 * 3 warm-up copies, and reports the median copy time and SIZE / time in GB/s (1e9 bytes/s; the
 * bytes copied, not read + written, as algbw counts them). Single thread; the kernel picks the
 * core, as it does for the benchmark ranks.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, posix_memalign under -std=c99 */

#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  size_t bytes = (size_t)64 << 20;
  int iters = 30, i;
  const char *json = NULL;
  unsigned char *src = NULL, *dst = NULL;
  double *times, median;
  for (i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-s") == 0 && bench_parse_size(argv[i + 1], &bytes) == 0) continue;
    if (strcmp(argv[i], "--iters") == 0 && (iters = atoi(argv[i + 1])) > 0) continue;
    if (strcmp(argv[i], "--json") == 0) {
      json = argv[i + 1];
      continue;
    }
    fprintf(stderr, "usage: memcpy_bw [-s 64M] [--iters 30] [--json FILE]\n");
    return 2;
  }
  if (argc % 2 == 0) {
    fprintf(stderr, "usage: memcpy_bw [-s 64M] [--iters 30] [--json FILE]\n");
    return 2;
  }
  if (posix_memalign((void **)&src, 4096, bytes) != 0 || posix_memalign((void **)&dst, 4096, bytes) != 0) {
    fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", bytes);
    return 1;
  }
  times = (double *)malloc(sizeof(double) * (size_t)iters);
  if (times == NULL) return 1;
  memset(src, 1, bytes); /* fault every page in before timing */
  memset(dst, 2, bytes);
  for (i = 0; i < 3 + iters; ++i) {
    double t0 = bench_now_us();
    memcpy(dst, src, bytes);
    if (i >= 3) times[i - 3] = bench_now_us() - t0;
    src[(size_t)i % bytes] ^= dst[bytes - 1]; /* keep the copies observable */
  }
  median = bench_median(times, (size_t)iters);
  printf("# memcpy_bw: %zu bytes, median of %d copies, one core\n", bytes, iters);
  printf("time_us %.1f  bw_GB/s %.3f\n", median, (double)bytes / (median * 1e3));
  if (json != NULL) {
    FILE *f = fopen(json, "w");
    if (f == NULL) return 1;
    fprintf(f, "{\"bytes\": %zu, \"time_us\": %.3f, \"bw_gbs\": %.4f}\n", bytes, median,
            (double)bytes / (median * 1e3));
    fclose(f);
  }
  free(times);
  free(src);
  free(dst);
  return 0;
}
