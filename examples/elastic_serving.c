/*
 * elastic_serving.c — a serving loop that survives a killed rank: the survivors shrink the world
 * and go on with a smaller tensor-parallel group; a replacement, when one is started, rejoins
 * and the world is whole again.
 *
 * Run under the launcher (it serves the job's store, which must outlive any rank):
 *
 *   pstate run -n 4 --respawn 1 -- ./elastic_serving --steps 200 --kill-rank 2 --kill-at-step 50
 *
 * Each step is one "forward" of a tensor-parallel layer: a TP all-reduce of HIDDEN floats whose
 * exact sum is known (rank r contributes (launch rank + 1) * (i % 5 + 1)), checked on every rank.
 * The rank named by --kill-rank SIGKILLs itself in the middle of step --kill-at-step's
 * all-reduce: a thread it starts just before the call kills it 200 us later. On a loaded machine
 * that thread may run only after the call returned; then the rank dies at once, before it starts
 * another all-reduce, so the step in flight on the survivors is --kill-at-step or the next, never
 * later. Whoever kills prints the step the rank was at, and whether inside its all-reduce.
 * The survivors' all-reduce fails (PSTATE_ERR_PEER_LOST, or ABORTED), so each:
 *   1. pstate_shrink: they agree on who is alive and rebuild the world, renumbered;
 *   2. pstate_initialize_model_parallel with tp = the new world size;
 *   3. repeat the step that failed (its inputs are still here), and go on.
 * Every --grow-every steps, while the world is smaller than it started, the survivors call
 * pstate_grow with a short timeout: a replacement that `pstate run --respawn` started (RANK of the
 * dead rank, PSTATE_REJOIN=1: its pstate_init returns once admitted) joins, everyone
 * re-initializes model parallel over the whole world, and rank 0 tells the newcomer which step
 * the job is at. Each rank prints how long recovery took (from the failed call to the first exact
 * step after it) and exits 0 when every step it ran was exact.
 */
#define _GNU_SOURCE
#include <pstate/pstate.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HIDDEN (1 << 19) /* floats: 2 MiB per all-reduce, long enough to be killed inside one */
#define MAX_WORLD 64

#define CHECK_OK(call)                                                                            \
  do {                                                                                            \
    pstate_status_t s_ = (call);                                                                  \
    if (s_ != PSTATE_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, pstate_status_string(s_), pstate_last_error()); \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The rank that kills itself: the step it is at and whether it is inside that step's all-reduce
 * (written by the main thread), and who kills first (the thread, or the main thread once step
 * --kill-at-step's all-reduce returned). */
static atomic_int current_step, in_call;
static atomic_flag dying = ATOMIC_FLAG_INIT;

static void die_now(int launch_rank, const char *where) {
  if (!atomic_flag_test_and_set(&dying)) {
    printf("launch rank %d: SIGKILL to myself %s step %d's all-reduce (monotonic %.1f ms)\n", launch_rank, where,
           atomic_load(&current_step), now_ms());
    fflush(stdout);
  }
  for (;;) {
    kill(getpid(), SIGKILL);
    pause();
  }
}

static void *die_soon(void *arg) {
  usleep(200);
  die_now(*(const int *)arg, atomic_load(&in_call) ? "inside" : "after");
  return NULL;
}

/* The world as this rank knows it: size, own rank, and each member's launch rank (so that every
 * rank can compute the exact sum it expects). */
typedef struct world_t {
  int size, rank;
  int launch[MAX_WORLD];
} world_t;

/* Sets up tp = world size and learns who is who (an all-gather of the launch ranks). */
static void setup(pstate_t *ps, int launch_rank, world_t *w, pstate_group_t **tp) {
  pstate_group_t *world = NULL;
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  CHECK_OK(pstate_group_info(world, &info));
  w->size = info.world_size;
  w->rank = info.rank;
  int32_t mine = launch_rank, all[MAX_WORLD];
  CHECK_OK(pstate_all_gather(world, &mine, all, 1, PSTATE_INT32, NULL));
  for (int i = 0; i < w->size; ++i) w->launch[i] = all[i];
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = w->size;
  CHECK_OK(pstate_initialize_model_parallel(ps, &cfg));
  CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_TP, tp));
}

static float contribution(int launch_rank, int i) { return (float)((launch_rank + 1) * (i % 5 + 1)); }

int main(int argc, char **argv) {
  int steps = 100, kill_rank = -1, kill_at = -1, grow_every = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--kill-rank") == 0) kill_rank = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--kill-at-step") == 0) kill_at = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--grow-every") == 0) grow_every = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--steps N] [--kill-rank R --kill-at-step S] [--grow-every K]\n", argv[0]);
      return 2;
    }
  }
  const char *rejoin = getenv("PSTATE_REJOIN");
  const int replacement = rejoin != NULL && strcmp(rejoin, "1") == 0;
  const int launch_rank = atoi(getenv("RANK") != NULL ? getenv("RANK") : "0");
  const int launch_world = atoi(getenv("WORLD_SIZE") != NULL ? getenv("WORLD_SIZE") : "1");

  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  params.init_method = "env://";
  pstate_t *ps = NULL;
  double t0 = now_ms();
  CHECK_OK(pstate_init(&params, &ps)); /* a replacement returns once the survivors admitted it */
  world_t w;
  pstate_group_t *tp = NULL, *world = NULL;
  setup(ps, launch_rank, &w, &tp);
  int step = 0;
  CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
  if (replacement) { /* learn where the job is (rank 0 says, after every grow) */
    int32_t at = 0;
    CHECK_OK(pstate_broadcast(world, &at, 1, PSTATE_INT32, 0, NULL));
    step = at;
    printf("launch rank %d (replacement): admitted as rank %d of %d after %.0f ms; the job is at step %d\n",
           launch_rank, w.rank, w.size, now_ms() - t0, step);
  } else {
    printf("launch rank %d: rank %d of %d, tp %d\n", launch_rank, w.rank, w.size, w.size);
  }
  fflush(stdout);

  static float buf[HIDDEN];
  int wrong = 0, shrinks = 0, grows = 0;
  double failed_at = -1;
  while (step < steps) {
    for (int i = 0; i < HIDDEN; ++i) buf[i] = contribution(launch_rank, i);
    const int killer = !replacement && launch_rank == kill_rank;
    if (killer) atomic_store(&current_step, step), atomic_store(&in_call, 1);
    if (killer && step == kill_at) {
      pthread_t t;
      pthread_create(&t, NULL, die_soon, (void *)&launch_rank); /* dies inside this step's all-reduce */
    }
    pstate_status_t s = pstate_all_reduce(tp, buf, buf, HIDDEN, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (killer) atomic_store(&in_call, 0);
    if (killer && step == kill_at) die_now(launch_rank, "after"); /* the thread was late: before the next step */
    if (s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_ABORTED) {
      if (failed_at < 0) failed_at = now_ms();
      printf("launch rank %d: step %d: %s: shrinking\n", launch_rank, step, pstate_status_string(s));
      fflush(stdout);
      size_t old_world = 0; /* pstate_shrink's *count: the world size before the call */
      CHECK_OK(pstate_shrink(ps, NULL, 0, &old_world)); /* NULL, 0: no new-rank map wanted */
      ++shrinks;
      setup(ps, launch_rank, &w, &tp);
      CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
      continue; /* the same step again, on the smaller world */
    }
    CHECK_OK(s);
    for (int i = 0; i < HIDDEN; ++i) {
      float want = 0;
      for (int k = 0; k < w.size; ++k) want += contribution(w.launch[k], i);
      if (buf[i] != want) {
        if (wrong++ < 3) fprintf(stderr, "step %d: [%d] = %g, expected %g\n", step, i, buf[i], want);
      }
    }
    if (failed_at >= 0) {
      const double now = now_ms();
      printf("launch rank %d: step %d exact on a world of %d, %.0f ms after the failure (monotonic %.1f ms)\n",
             launch_rank, step, w.size, now - failed_at, now);
      fflush(stdout);
      failed_at = -1;
    }
    ++step;
    if (grow_every > 0 && step % grow_every == 0 && w.size < launch_world && step < steps) {
      s = pstate_grow(ps, 500);
      if (s == PSTATE_OK) {
        ++grows;
        setup(ps, launch_rank, &w, &tp);
        CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_WORLD, &world));
        int32_t at = step;
        CHECK_OK(pstate_broadcast(world, &at, 1, PSTATE_INT32, 0, NULL));
        printf("launch rank %d: step %d: a replacement joined; rank %d of %d again\n", launch_rank, step, w.rank, w.size);
        fflush(stdout);
      } else if (s != PSTATE_ERR_TIMEOUT) {
        CHECK_OK(s);
      }
    }
  }
  printf("launch rank %d: %d steps done as rank %d of %d (%d shrink%s, %d grow%s), %s\n", launch_rank, step, w.rank,
         w.size, shrinks, shrinks == 1 ? "" : "s", grows, grows == 1 ? "" : "s", wrong ? "WRONG RESULTS" : "all exact");
  CHECK_OK(pstate_destroy_model_parallel(ps));
  CHECK_OK(pstate_finalize(ps));
  return wrong ? 1 : 0;
}
