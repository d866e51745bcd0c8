/*
 * agreement_loop.c — back-to-back calls of one small collective, for bench/agreement_cost.sh.
 *
 *   pstate run -n 2 --bind-cores -- agreement_loop OP BYTES [CALLS] [BATCHES]
 *
 * OP: all_reduce (float32 sum), all_gather, broadcast (root 0), barrier, broadcast_object (BYTES
 * bytes from root 0; the root asks for no copy, as pstate bench does). Each rank runs CALLS
 * untimed calls, then BATCHES batches of CALLS calls back to back on the world group, timing each
 * batch; rank 0 prints the median batch's time per call in ns ("ns_per_call N"). Back to back,
 * the time per call is the hand-off latency of the collective plus everything the library does
 * per call (what the agreement adds shows up here in full, unlike a per-call timer of ~20 ns
 * resolution). Only the public API is used; the results are checked once at the end.
 */
#include <pstate/pstate.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int is_root;  /* group rank 0 of the world group */
static size_t object_bytes;

static pstate_status_t call(pstate_group_t *g, const char *op, float *send, float *recv, size_t count) {
  if (strcmp(op, "all_reduce") == 0) return pstate_all_reduce(g, send, recv, count, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  if (strcmp(op, "broadcast_object") == 0) {
    pstate_bytes_t out = {NULL, 0};
    pstate_status_t s = pstate_broadcast_object(g, send, object_bytes, 0, is_root ? NULL : &out);
    pstate_bytes_free(&out);
    return s;
  }
  if (strcmp(op, "all_gather") == 0) return pstate_all_gather(g, send, recv, count, PSTATE_FLOAT32, NULL);
  if (strcmp(op, "broadcast") == 0) return pstate_broadcast(g, send, count, PSTATE_FLOAT32, 0, NULL);
  return pstate_barrier(g);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: agreement_loop all_reduce|all_gather|broadcast|barrier|broadcast_object BYTES [CALLS] "
                    "[BATCHES]\n");
    return 2;
  }
  const char *op = argv[1];
  size_t count = (size_t)atol(argv[2]) / sizeof(float);
  object_bytes = (size_t)atol(argv[2]);
  long calls = argc > 3 ? atol(argv[3]) : 100000, batches = argc > 4 ? atol(argv[4]) : 9;
  if (count == 0) count = 1;
  pstate_t *ps;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  if (pstate_init(&p, &ps) != PSTATE_OK) {
    fprintf(stderr, "agreement_loop: %s\n", pstate_last_error());
    return 1;
  }
  pstate_group_t *world;
  pstate_get_group(ps, PSTATE_GROUP_WORLD, &world);
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  pstate_group_info(world, &info);
  is_root = info.rank_in_group == 0;
  float *send = malloc(count * 64 * sizeof(float)), *recv = malloc(count * 64 * sizeof(float));
  for (size_t i = 0; i < count; ++i) send[i] = 1.0f;
  double *t = malloc(sizeof(double) * (size_t)batches);
  int bad = 0;
  for (long i = 0; i < calls && !bad; ++i) bad = call(world, op, send, recv, count) != PSTATE_OK;
  for (long b = 0; b < batches && !bad; ++b) {
    double t0 = now_ns();
    for (long i = 0; i < calls && !bad; ++i) bad = call(world, op, send, recv, count) != PSTATE_OK;
    t[b] = (now_ns() - t0) / (double)calls;
  }
  if (bad) fprintf(stderr, "agreement_loop: %s\n", pstate_last_error());
  if (!bad && strcmp(op, "all_reduce") == 0) {
    for (size_t i = 0; i < count; ++i) send[i] = 1.0f;
    bad = call(world, op, send, recv, count) != PSTATE_OK || recv[0] != (float)info.world_size;
  }
  qsort(t, (size_t)batches, sizeof(double), cmp);
  if (info.rank_in_group == 0 && !bad) printf("ns_per_call %.2f\n", t[batches / 2]);
  pstate_finalize(ps);
  free(send);
  free(recv);
  free(t);
  return bad;
}
