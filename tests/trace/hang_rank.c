/*
 * hang_rank.c — one rank of a job that goes wrong on purpose, for the flight-recorder scenarios
 * (tests/trace/scenarios.sh, issue 14). Public API only; started by `pstate run -n 4`.
 *
 * usage: hang_rank SCENARIO
 *
 * Every rank initializes tp = world size, then calls ITERS (10) all_reduces of 8 floats on tp;
 * at iteration 5 the rank named by HANG_CULPRIT (default 3) does something else:
 *   skip      skips that all_reduce, then goes on (so it finishes its loop one call early and
 *             calls the barrier on world that ends the loop while the others wait on tp)
 *   kind      calls all_gather (8 floats) instead
 *   count     calls all_reduce with 16 floats instead of 8
 *   sigstop   the loop is on world with broadcasts: the culprit stops itself (SIGSTOP) instead
 *   usercode  sleeps in user code (60 s) instead of calling anything (saying so on stderr first)
 *   dies      SIGKILLs itself instead
 *   good      nothing: every rank completes and writes its dump by pstate_trace_dump (the control)
 *   shrunk    (run with --keep-going) the culprit SIGKILLs itself; the survivors get PEER_LOST, call
 *             pstate_shrink, initialize tp = the 3 survivors and go on; two iterations later
 *             launch rank 3 sleeps 3 s in user code and exits 3 there: the others time out in
 *             the new tp's all_reduce, and rank 3's only dump is the one of its PEER_LOST, from
 *             before the shrink
 * After the loop every rank calls pstate_barrier(world) and pstate_finalize. A rank whose call
 * fails prints the status and pstate_last_error() on stderr and exits 1 without finalize (its
 * dump was written by the failing call). Exit 0 when everything it called returned OK.
 */
#define _GNU_SOURCE
#include <pstate/pstate.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITERS 10
#define FAULT_AT 5

static void die_on(pstate_status_t s, int rank, const char *what) {
  if (s == PSTATE_OK) return;
  fprintf(stderr, "hang_rank %d: %s: %s: %s\n", rank, what, pstate_status_string(s), pstate_last_error());
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hang_rank skip|kind|count|sigstop|usercode|dies|good|shrunk\n");
    return 2;
  }
  const char *scenario = argv[1];
  const char *c = getenv("HANG_CULPRIT");
  const int culprit = c != NULL ? atoi(c) : 3;

  pstate_t *ps = NULL;
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  pstate_status_t s = pstate_init(&params, &ps);
  if (s != PSTATE_OK) {
    fprintf(stderr, "hang_rank: pstate_init: %s: %s\n", pstate_status_string(s), pstate_last_error());
    return 1;
  }
  pstate_group_t *world = NULL, *tp = NULL;
  die_on(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world), -1, "get world");
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  die_on(pstate_group_info(world, &info), -1, "group info");
  const int rank = info.rank;
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = info.world_size;
  die_on(pstate_initialize_model_parallel(ps, &cfg), rank, "initialize_model_parallel");
  die_on(pstate_get_group(ps, PSTATE_GROUP_TP, &tp), rank, "get tp");

  float a[16], b[16 * 64];
  for (int i = 0; i < 16; ++i) a[i] = (float)(rank + i);
  const int on_world = strcmp(scenario, "sigstop") == 0;
  const int shrunk = strcmp(scenario, "shrunk") == 0;
  const int launch_rank = rank;  /* the world's numbering changes at a shrink; RANK does not */
  int shrunk_at = -1;
  for (int it = 0; it < ITERS; ++it) {
    if (shrunk && shrunk_at >= 0 && it == shrunk_at + 2 && launch_rank == 3) {
      unsigned left = 3; /* in user code while the new tp's all_reduce waits for it */
      while ((left = sleep(left)) > 0) {
      }
      fprintf(stderr, "hang_rank: launch rank 3 leaves in its own code\n");
      return 3;
    }
    if (shrunk && it == FAULT_AT && rank == culprit) raise(SIGKILL);
    if (it == FAULT_AT && rank == culprit) {
      if (strcmp(scenario, "skip") == 0) continue;
      if (strcmp(scenario, "kind") == 0) {
        die_on(pstate_all_gather(tp, a, b, 8, PSTATE_FLOAT32, NULL), rank, "all_gather");
        continue;
      }
      if (strcmp(scenario, "count") == 0) {
        die_on(pstate_all_reduce(tp, a, b, 16, PSTATE_FLOAT32, PSTATE_SUM, NULL), rank, "all_reduce");
        continue;
      }
      if (strcmp(scenario, "sigstop") == 0) raise(SIGSTOP);
      if (strcmp(scenario, "usercode") == 0) {  /* busy in its own code: a signal does not end it */
        fprintf(stderr, "hang_rank %d: in user code instead of all_reduce #%d\n", rank, FAULT_AT);
        unsigned left = 60;
        while ((left = sleep(left)) > 0) {
        }
      }
      if (strcmp(scenario, "dies") == 0) raise(SIGKILL);
    }
    if (on_world) {
      die_on(pstate_broadcast(world, a, 8, PSTATE_FLOAT32, 0, NULL), rank, "broadcast");
      continue;
    }
    s = pstate_all_reduce(tp, a, b, 8, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (shrunk && shrunk_at < 0 && (s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_ABORTED)) {
      die_on(pstate_shrink(ps, NULL, 0, &(size_t){0}), launch_rank, "shrink");
      die_on(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world), launch_rank, "get world");
      die_on(pstate_group_info(world, &info), launch_rank, "group info");
      cfg.tensor_parallel_size = info.world_size;
      die_on(pstate_initialize_model_parallel(ps, &cfg), launch_rank, "initialize_model_parallel");
      die_on(pstate_get_group(ps, PSTATE_GROUP_TP, &tp), launch_rank, "get tp");
      shrunk_at = it;
      continue;
    }
    die_on(s, launch_rank, "all_reduce");
  }
  die_on(pstate_barrier(world), rank, "barrier");
  if (strcmp(scenario, "good") == 0) die_on(pstate_trace_dump(ps, NULL), rank, "trace_dump");
  die_on(pstate_finalize(ps), rank, "finalize");
  return 0;
}
