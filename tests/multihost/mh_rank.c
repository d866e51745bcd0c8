/*
 * mh_rank.c — one rank of the multi-host tests (the scripts of tests/multihost/), against the public API.
 *
 * The scripts start it on test hosts made of network namespaces, under `pstate run --nnodes` or
 * directly with the torchrun variables, and read its exit status and its PSTATE_DEBUG=INFO log.
 * Every result is checked against a reference computed here from (rank, index, seed) alone, so
 * a wrong byte anywhere on the way (shared memory inside a host, TCP across) is a failure.
 *
 *   mh_rank lifecycle   pstate_init; world all_reduce/all_gather/all_to_all (the all_to_all
 *                       opens an endpoint between every pair, so the log shows every pair's
 *                       transport); model parallel A: tp = ranks per host, pp = hosts: every TP
 *                       and PP operation, objects included; destroy; model parallel B: tp =
 *                       world, ep = hosts (moe_ep across hosts, moe_tp inside): EP all_to_all
 *                       and all_reduce; destroy; finalize. MH_EXPECT_LOCAL_TP=1 also checks with
 *                       pstate_group_same_node that A's TP groups stay inside a host and its PP
 *                       and B's EP groups have one rank per host. MH_ROUNDS repeats A's
 *                       operations (default 2).
 *   mh_rank loop        all_reduces on the world until one fails (a peer killed, a link cut):
 *                       prints "mh: looping" after the first success, then must fail with
 *                       PEER_LOST or TIMEOUT within the timeout + 2 s of its last success,
 *                       get ABORTED afterwards, and pstate_abort must return at once.
 *                       MH_SUICIDE_MS=N: this rank SIGKILLs itself N ms after the loop began,
 *                       from a second thread, so it dies in the middle of an all-reduce.
 *   mh_rank shrink      like loop (MH_SUICIDE_MS kills the victim), then the survivors call
 *                       pstate_shrink: their new world must be the old one less MH_EXPECT_DEAD,
 *                       renumbered in order; then the whole group suite runs exactly on the new
 *                       world and on tp = MH_TP_AFTER (default: the new world size), and every
 *                       survivor prints the time from its failed call to its first exact
 *                       collective after the shrink; finalize.
 *   mh_rank job         MH_OPS checked all_reduces (default 200) paced by MH_PACE_MS, then
 *                       finalize: the job that strangers must not disturb.
 *   mh_rank init_fails  pstate_init must fail (the store died during rendezvous): exits 0 when
 *                       it failed with a message naming the store within the timeout + 2 s.
 *   mh_rank stranger    pstate_init with the environment it got (a wrong or missing job token):
 *                       exits 0 when refused with PSTATE_ERR_AUTH.
 *   mh_rank etcd        the job on an etcd store (PSTATE_STORE=etcd://...) losing a whole host:
 *                       all_reduces until one fails (the script kills host 0: ranks, launcher,
 *                       etcd member); pstate_live_ranks must be the world less MH_EXPECT_DEAD (a
 *                       comma list: their etcd leases lapsed); pstate_shrink to exactly the
 *                       survivors, an exact all_reduce; pstate_grow admits the replacement
 *                       (MH_REPLACEMENT=1: this process is it, started with PSTATE_REJOIN=1),
 *                       an exact all_reduce on the grown world; prints "grown"; then waits for
 *                       the file MH_QUORUM_GONE (the script kills a second etcd member): pstate_shrink
 *                       (every rank's own store calls) must fail with PEER_LOST naming etcd within
 *                       MH_TIMEOUT_MS + 3 s; abort.
 *
 * Common environment: the torchrun (or mpirun, srun) variables; MH_TIMEOUT_MS (pstate timeout,
 * default 30000); MH_SOCKET_IFNAME_PARAM: passed as pstate_init_params_t.socket_ifname.
 * Exit status 0 = every check passed; the reason of a failure is printed on stderr.
 */
#define _GNU_SOURCE
#include <pstate/pstate.h>

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "values.h"

static int g_rank = -1;  /* pstate's world rank once known (RANK before) */
static long g_checks = 0;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v != NULL && *v ? atoi(v) : fallback;
}

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "mh: rank %d: FAILED: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 1;
}

#define OK(call)                                                                                   \
  do {                                                                                             \
    pstate_status_t ok_s_ = (call);                                                                \
    if (ok_s_ != PSTATE_OK)                                                                        \
      return fail("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, pstate_status_string(ok_s_),  \
                  pstate_last_error());                                                            \
  } while (0)

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    ++g_checks;                                                                                    \
    if (!(cond)) return fail(__VA_ARGS__);                                                         \
  } while (0)

/* ---- reference values ------------------------------------------------------------------------- */

/* Small integers: sums over up to 64 ranks stay exact in every dtype, float16/bfloat16 included. */
static double value(int rank, size_t i, int seed) { return (double)((rank * 7 + (int)(i % 1021) * 3 + seed) % 13); }

static void fill(pstate_dtype_t dt, void *buf, size_t count, int rank, int seed) {
  for (size_t i = 0; i < count; ++i) pstate_test_store(dt, buf, i, value(rank, i, seed));
}

static double reduce_ref(pstate_reduce_op_t op, const int *ranks, int n, size_t i, int seed) {
  double acc = value(ranks[0], i, seed);
  for (int k = 1; k < n; ++k) {
    double v = value(ranks[k], i, seed);
    if (op == PSTATE_SUM) acc += v;
    else if (op == PSTATE_MAX) acc = v > acc ? v : acc;
    else if (op == PSTATE_MIN) acc = v < acc ? v : acc;
  }
  return acc;
}

/* Compares element i of buf with want; returns 1 on a mismatch (after printing it). */
static int differs(pstate_dtype_t dt, const void *buf, size_t i, double want, const char *what) {
  double got = pstate_test_load(dt, buf, i);
  if (got == want) return 0;
  fail("%s: %s element %zu is %g, expected %g", what, pstate_dtype_name(dt), i, got, want);
  return 1;
}

/* ---- group facts ---------------------------------------------------------------------------------- */

typedef struct group_t {
  pstate_group_t *g;
  pstate_group_info_t info;
  int ranks[256];
  int size;
  int same_node[256]; /* relative to this rank */
} group_t;

static int get_group(pstate_t *ps, pstate_group_kind_t kind, group_t *out) {
  memset(out, 0, sizeof *out);
  pstate_group_info_t init = PSTATE_GROUP_INFO_INIT;
  out->info = init;
  OK(pstate_get_group(ps, kind, &out->g));
  OK(pstate_group_info(out->g, &out->info));
  size_t n = 0;
  OK(pstate_group_ranks(out->g, out->ranks, 256, &n));
  out->size = (int)n;
  OK(pstate_group_same_node(out->g, out->info.rank_in_group, out->same_node, 256, &(size_t){0}));
  return 0;
}

static int local_members(const group_t *g) {
  int n = 0;
  for (int i = 0; i < g->size; ++i) n += g->same_node[i];
  return n;
}

/* ---- operations, each checked ----------------------------------------------------------------- */

static const pstate_dtype_t kDtypes[] = {PSTATE_FLOAT32, PSTATE_BFLOAT16, PSTATE_INT64, PSTATE_FLOAT16, PSTATE_INT32,
                                         PSTATE_FLOAT64, PSTATE_UINT8};

static int check_all_reduce(const group_t *g, pstate_dtype_t dt, pstate_reduce_op_t op, size_t count, int seed) {
  size_t es = pstate_dtype_size(dt);
  unsigned char *buf = malloc(count * es + 1);
  fill(dt, buf, count, g->info.rank, seed);
  OK(pstate_all_reduce(g->g, buf, buf, count, dt, op, NULL));
  int bad = 0;
  for (size_t i = 0; i < count && !bad; ++i)
    bad = differs(dt, buf, i, reduce_ref(op, g->ranks, g->size, i, seed), g->info.name);
  free(buf);
  CHECK(!bad, "%s all_reduce %s %s count %zu", g->info.name, pstate_dtype_name(dt), pstate_reduce_op_name(op), count);
  return 0;
}

static int check_all_gather(const group_t *g, pstate_dtype_t dt, size_t count, int seed) {
  size_t es = pstate_dtype_size(dt);
  unsigned char *send = malloc(count * es + 1), *recv = malloc(count * es * (size_t)g->size + 1);
  fill(dt, send, count, g->info.rank, seed);
  OK(pstate_all_gather(g->g, send, recv, count, dt, NULL));
  int bad = 0;
  for (int r = 0; r < g->size && !bad; ++r)
    for (size_t i = 0; i < count && !bad; ++i)
      bad = differs(dt, recv + ((size_t)r * count) * es, i, value(g->ranks[r], i, seed), g->info.name);
  free(send);
  free(recv);
  CHECK(!bad, "%s all_gather %s count %zu", g->info.name, pstate_dtype_name(dt), count);
  return 0;
}

static int check_reduce_scatter(const group_t *g, pstate_dtype_t dt, size_t count, int seed) {
  size_t es = pstate_dtype_size(dt), total = count * (size_t)g->size;
  unsigned char *send = malloc(total * es + 1), *recv = malloc(count * es + 1);
  fill(dt, send, total, g->info.rank, seed);
  OK(pstate_reduce_scatter(g->g, send, recv, count, dt, PSTATE_SUM, NULL));
  int bad = 0;
  size_t base = (size_t)g->info.rank_in_group * count;
  for (size_t i = 0; i < count && !bad; ++i)
    bad = differs(dt, recv, i, reduce_ref(PSTATE_SUM, g->ranks, g->size, base + i, seed), g->info.name);
  free(send);
  free(recv);
  CHECK(!bad, "%s reduce_scatter %s count %zu", g->info.name, pstate_dtype_name(dt), count);
  return 0;
}

static int check_broadcast_gather(const group_t *g, size_t count, int seed) {
  pstate_dtype_t dt = PSTATE_FLOAT32;
  int root = seed % g->size;
  float *buf = malloc(count * sizeof(float) + 4), *all = malloc(count * sizeof(float) * (size_t)g->size + 4);
  fill(dt, buf, count, g->info.rank_in_group == root ? g->ranks[root] : -1000, seed);
  OK(pstate_broadcast(g->g, buf, count, dt, root, NULL));
  int bad = 0;
  for (size_t i = 0; i < count && !bad; ++i) bad = differs(dt, buf, i, value(g->ranks[root], i, seed), g->info.name);
  CHECK(!bad, "%s broadcast from %d count %zu", g->info.name, root, count);
  fill(dt, buf, count, g->info.rank, seed + 1);
  OK(pstate_gather(g->g, buf, g->info.rank_in_group == root ? all : NULL, count, dt, root, NULL));
  if (g->info.rank_in_group == root)
    for (int r = 0; r < g->size && !bad; ++r)
      for (size_t i = 0; i < count && !bad; ++i)
        bad = differs(dt, all + (size_t)r * count, i, value(g->ranks[r], i, seed + 1), g->info.name);
  free(buf);
  free(all);
  CHECK(!bad, "%s gather to %d count %zu", g->info.name, root, count);
  return 0;
}

/* Block j of rank r's send holds value(r * 1000 + j, i): the receiver knows who sent what. */
static int check_all_to_all(const group_t *g, size_t count, int seed) {
  pstate_dtype_t dt = PSTATE_INT32;
  size_t total = count * (size_t)g->size;
  int32_t *send = malloc(total * 4 + 4), *recv = malloc(total * 4 + 4);
  for (int j = 0; j < g->size; ++j) fill(dt, send + (size_t)j * count, count, g->info.rank * 1000 + j, seed);
  OK(pstate_all_to_all(g->g, send, recv, count, dt, NULL));
  int bad = 0;
  for (int r = 0; r < g->size && !bad; ++r)
    for (size_t i = 0; i < count && !bad; ++i)
      bad = differs(dt, recv + (size_t)r * count, i, value(g->ranks[r] * 1000 + g->info.rank_in_group, i, seed),
                    g->info.name);
  free(send);
  free(recv);
  CHECK(!bad, "%s all_to_all count %zu", g->info.name, count);
  return 0;
}

static int check_objects(const group_t *g, int seed) {
  char text[128];
  int root = (seed + 1) % g->size;
  snprintf(text, sizeof text, "batch %d from rank %d", seed, g->ranks[root]);
  pstate_bytes_t got = {NULL, 0};
  OK(pstate_broadcast_object(g->g, text, strlen(text) + 1, root, &got));
  CHECK(got.size == strlen(text) + 1 && memcmp(got.data, text, got.size) == 0, "%s broadcast_object", g->info.name);
  pstate_bytes_free(&got);
  char mine[64];
  int len = snprintf(mine, sizeof mine, "rank %d says %d", g->info.rank, seed);
  size_t sizes[256];
  OK(pstate_all_gather_object(g->g, mine, (size_t)len, &got, sizes, 256, &(size_t){0}));
  size_t off = 0;
  for (int r = 0; r < g->size; ++r) {
    char want[64];
    int wl = snprintf(want, sizeof want, "rank %d says %d", g->ranks[r], seed);
    CHECK(sizes[r] == (size_t)wl && off + sizes[r] <= got.size && memcmp((char *)got.data + off, want, sizes[r]) == 0,
          "%s all_gather_object entry %d", g->info.name, r);
    off += sizes[r];
  }
  pstate_bytes_free(&got);
  return 0;
}

/* Pipeline hand-off along a PP group: stage s sends to s + 1 (tensor, then object). */
static int check_pipeline(const group_t *pp, size_t count, int seed) {
  int me = pp->info.rank_in_group, n = pp->size;
  float *buf = malloc(count * sizeof(float) + 4);
  if (me + 1 < n) {
    fill(PSTATE_FLOAT32, buf, count, pp->info.rank, seed);
    OK(pstate_send(pp->g, buf, count, PSTATE_FLOAT32, me + 1, NULL));
    char meta[48];
    int len = snprintf(meta, sizeof meta, "stage %d seed %d", me, seed);
    OK(pstate_send_object(pp->g, meta, (size_t)len, me + 1));
  }
  if (me > 0) {
    OK(pstate_recv(pp->g, buf, count, PSTATE_FLOAT32, me - 1, NULL));
    int bad = 0;
    for (size_t i = 0; i < count && !bad; ++i) bad = differs(PSTATE_FLOAT32, buf, i, value(pp->ranks[me - 1], i, seed), pp->info.name);
    CHECK(!bad, "%s recv from stage %d count %zu", pp->info.name, me - 1, count);
    pstate_bytes_t obj = {NULL, 0};
    OK(pstate_recv_object(pp->g, me - 1, &obj));
    char want[48];
    int wl = snprintf(want, sizeof want, "stage %d seed %d", me - 1, seed);
    CHECK(obj.size == (size_t)wl && memcmp(obj.data, want, obj.size) == 0, "%s recv_object", pp->info.name);
    pstate_bytes_free(&obj);
  }
  free(buf);
  OK(pstate_barrier(pp->g));
  return 0;
}

static int group_suite(const group_t *g, int seed, int big) {
  size_t sizes[] = {1, 1000, big ? (size_t)(256 * 1024 + 3) : (size_t)4096};
  for (size_t s = 0; s < 3; ++s)
    for (size_t d = 0; d < sizeof kDtypes / sizeof kDtypes[0]; ++d) {
      pstate_dtype_t dt = kDtypes[d];
      if (sizes[s] > 4096 && dt != PSTATE_FLOAT32 && dt != PSTATE_BFLOAT16) continue;
      if (check_all_reduce(g, dt, s == 1 ? PSTATE_MAX : PSTATE_SUM, sizes[s], seed + (int)d)) return 1;
    }
  if (check_all_gather(g, PSTATE_BFLOAT16, 777, seed) || check_all_gather(g, PSTATE_FLOAT32, big ? 65536 : 512, seed) ||
      check_reduce_scatter(g, PSTATE_FLOAT32, big ? 40000 : 300, seed) ||
      check_reduce_scatter(g, PSTATE_INT64, 5, seed) || check_broadcast_gather(g, big ? 100000 : 999, seed) ||
      check_all_to_all(g, 1, seed) || check_all_to_all(g, big ? 20000 : 333, seed) || check_objects(g, seed))
    return 1;
  OK(pstate_barrier(g->g));
  return 0;
}

/* ---- modes -------------------------------------------------------------------------------------- */

static pstate_status_t init_from_env(pstate_t **ps) {
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.timeout_ms = env_int("MH_TIMEOUT_MS", 30000);
  p.socket_ifname = getenv("MH_SOCKET_IFNAME_PARAM"); /* NULL: PSTATE_SOCKET_IFNAME */
  return pstate_init(&p, ps);
}

static int model_parallel_a(pstate_t *ps, int hosts, int per_host, int expect_local, int rounds) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = per_host;
  cfg.pipeline_parallel_size = hosts;
  OK(pstate_initialize_model_parallel(ps, &cfg));
  group_t tp, pp;
  if (get_group(ps, PSTATE_GROUP_TP, &tp) || get_group(ps, PSTATE_GROUP_PP, &pp)) return 1;
  printf("mh: rank %d: A tp %s [%d..%d] pp %s [%d..%d]\n", tp.info.rank, tp.info.name, tp.info.first_rank,
         tp.info.last_rank, pp.info.name, pp.info.first_rank, pp.info.last_rank);
  if (expect_local) {
    CHECK(local_members(&tp) == tp.size, "%s: only %d of %d TP ranks share this host", tp.info.name, local_members(&tp), tp.size);
    CHECK(local_members(&pp) == 1, "%s: %d PP ranks share this host (expected one per host)", pp.info.name, local_members(&pp));
  }
  for (int round = 0; round < rounds; ++round) {
    int seed = 100 * round; /* the same on every rank: the references must agree */
    if (group_suite(&tp, seed, 1) || group_suite(&pp, seed + 50, round == 0)) return 1;
    /* communication_op.py's helpers on the TP group */
    float x[300];
    fill(PSTATE_FLOAT32, x, 300, tp.info.rank, seed + 3);
    OK(pstate_tp_allreduce(ps, x, 300, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    for (size_t i = 0; i < 300; ++i)
      CHECK(x[i] == (float)reduce_ref(PSTATE_SUM, tp.ranks, tp.size, i, seed + 3), "tp_allreduce element %zu", i);
    float y[64 * 64];
    fill(PSTATE_FLOAT32, x, 64, tp.info.rank, seed + 4);
    OK(pstate_tp_allgather(ps, x, y, 64, PSTATE_FLOAT32, NULL));
    for (int r = 0; r < tp.size; ++r)
      for (size_t i = 0; i < 64; ++i)
        CHECK(y[(size_t)r * 64 + i] == (float)value(tp.ranks[r], i, seed + 4), "tp_allgather block %d", r);
    if (check_pipeline(&pp, 50000, seed + 5)) return 1;
  }
  OK(pstate_destroy_model_parallel(ps));
  return 0;
}

static int model_parallel_b(pstate_t *ps, int world, int hosts, int expect_local) {
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = world;
  cfg.expert_parallel_size = hosts;
  OK(pstate_initialize_model_parallel(ps, &cfg));
  group_t ep, moe_tp;
  if (get_group(ps, PSTATE_GROUP_MOE_EP, &ep) || get_group(ps, PSTATE_GROUP_MOE_TP, &moe_tp)) return 1;
  printf("mh: rank %d: B moe_ep %s [%d..%d] moe_tp %s\n", ep.info.rank, ep.info.name, ep.info.first_rank,
         ep.info.last_rank, moe_tp.info.name);
  if (expect_local) {
    CHECK(local_members(&ep) == 1, "%s: %d EP ranks share this host (expected one per host)", ep.info.name, local_members(&ep));
    CHECK(local_members(&moe_tp) == moe_tp.size, "%s spans hosts", moe_tp.info.name);
  }
  /* MoE dispatch/combine: all_to_all of token blocks over EP, then a reduction over moe_tp */
  for (int round = 0; round < 3; ++round) {
    if (check_all_to_all(&ep, 4096 + (size_t)round, 700 + round) || check_all_reduce(&ep, PSTATE_BFLOAT16, PSTATE_SUM, 8192, 710 + round) ||
        check_all_reduce(&moe_tp, PSTATE_FLOAT32, PSTATE_SUM, 8192, 720 + round) || check_all_gather(&ep, PSTATE_INT64, 100, 730 + round))
      return 1;
  }
  group_t tp;
  if (get_group(ps, PSTATE_GROUP_TP, &tp) || check_all_reduce(&tp, PSTATE_FLOAT32, PSTATE_SUM, 10000, 740)) return 1;
  OK(pstate_destroy_model_parallel(ps));
  return 0;
}

static int mode_lifecycle(void) {
  double t0 = now_ms();
  pstate_t *ps = NULL;
  OK(init_from_env(&ps));
  group_t world;
  if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
  g_rank = world.info.rank;
  int per_host = local_members(&world), hosts = world.size / per_host;
  int expect_local = env_int("MH_EXPECT_LOCAL_TP", 0);
  printf("mh: rank %d (launcher rank %s, local rank %d): %d hosts x %d ranks\n", g_rank, getenv("RANK"),
         world.info.local_rank, hosts, per_host);
  CHECK(hosts * per_host == world.size, "%d ranks share this host but the world of %d is not a multiple", per_host, world.size);
  if (group_suite(&world, 7, 0)) return 1;
  if (model_parallel_a(ps, hosts, per_host, expect_local, env_int("MH_ROUNDS", 2))) return 1;
  if (hosts > 1 && model_parallel_b(ps, world.size, hosts, expect_local)) return 1;
  OK(pstate_finalize(ps));
  printf("mh: rank %d: lifecycle ok, %ld checks in %.1f s\n", g_rank, g_checks, (now_ms() - t0) / 1e3);
  return 0;
}

static void *suicide(void *arg) {
  usleep((useconds_t)(*(int *)arg) * 1000u);
  fprintf(stderr, "mh: rank %d: SIGKILL to myself now\n", g_rank);
  kill(getpid(), SIGKILL);
  return NULL;
}

static int mode_loop(void) {
  int timeout = env_int("MH_TIMEOUT_MS", 3000);
  pstate_t *ps = NULL;
  OK(init_from_env(&ps));
  group_t world;
  if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
  g_rank = world.info.rank;
  size_t count = 64 * 1024;
  float *buf = malloc(count * sizeof(float));
  double last_ok = now_ms();
  pstate_status_t s = PSTATE_OK;
  int suicide_ms = env_int("MH_SUICIDE_MS", -1);
  pthread_t killer;
  for (long iter = 0; s == PSTATE_OK; ++iter) {
    fill(PSTATE_FLOAT32, buf, count, g_rank, (int)(iter % 5));
    s = pstate_all_reduce(world.g, buf, buf, count, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (s != PSTATE_OK) break;
    for (size_t i = 0; i < count; i += 997)
      CHECK(buf[i] == (float)reduce_ref(PSTATE_SUM, world.ranks, world.size, i, (int)(iter % 5)), "loop all_reduce element %zu", i);
    last_ok = now_ms();
    if (iter == 0) {
      printf("mh: rank %d: looping\n", g_rank);
      fflush(stdout);
      if (suicide_ms >= 0) pthread_create(&killer, NULL, suicide, &suicide_ms);
    }
  }
  double waited = now_ms() - last_ok;
  printf("mh: rank %d: %s after %.0f ms (bound %d ms): %s\n", g_rank, pstate_status_string(s), waited, timeout + 2000,
         pstate_last_error());
  CHECK(s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_TRANSPORT, "status %s", pstate_status_string(s));
  CHECK(waited <= timeout + 2000, "took %.0f ms to fail (bound %d ms)", waited, timeout + 2000);
  /* MH_EXPECT_DEAD=R: pstate_live_ranks must be the world less R on every survivor, whichever
   * host it is on and whether or not it ever talked to R (the store saw R's connection close).
   * The survivors linger MH_LINGER_MS before aborting, so none has left when the others look. */
  int expect_dead = env_int("MH_EXPECT_DEAD", -1);
  if (expect_dead >= 0) {
    int live[64];
    size_t n = 0;
    OK(pstate_live_ranks(ps, live, 64, &n));
    char text[256] = "";
    for (size_t i = 0; i < n; ++i)
      snprintf(text + strlen(text), sizeof text - strlen(text), "%s%d", i ? " " : "", live[i]);
    printf("mh: rank %d: live ranks %s\n", g_rank, text);
    size_t k = 0;
    for (int r = 0; r < (int)world.info.world_size; ++r) {
      if (r == expect_dead) continue;
      CHECK(k < n && live[k] == r, "live rank #%zu should be %d (live: %s)", k, r, text);
      ++k;
    }
    CHECK(n == k, "%zu live ranks, expected %zu (live: %s)", n, k, text);
    usleep((useconds_t)env_int("MH_LINGER_MS", 0) * 1000);
  }
  CHECK(pstate_all_reduce(world.g, buf, buf, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_ERR_ABORTED,
        "a failed context refuses further collectives");
  double t0 = now_ms();
  OK(pstate_abort(ps));
  CHECK(now_ms() - t0 < 2000, "pstate_abort took %.0f ms", now_ms() - t0);
  free(buf);
  printf("mh: rank %d: failed fast as it should\n", g_rank);
  return 0;
}

static int mode_shrink(void) {
  pstate_t *ps = NULL;
  OK(init_from_env(&ps));
  group_t world;
  if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
  g_rank = world.info.rank;
  const int old_size = world.size, old_rank = g_rank;
  size_t count = 64 * 1024;
  float *buf = malloc(count * sizeof(float));
  pstate_status_t s = PSTATE_OK;
  int suicide_ms = env_int("MH_SUICIDE_MS", -1);
  pthread_t killer;
  for (long iter = 0; s == PSTATE_OK; ++iter) {
    fill(PSTATE_FLOAT32, buf, count, g_rank, (int)(iter % 5));
    s = pstate_all_reduce(world.g, buf, buf, count, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    if (iter == 0 && s == PSTATE_OK) {
      printf("mh: rank %d: looping\n", g_rank);
      fflush(stdout);
      if (suicide_ms >= 0) pthread_create(&killer, NULL, suicide, &suicide_ms);
    }
  }
  const double failed_at = now_ms();
  printf("mh: rank %d: %s: %s\n", g_rank, pstate_status_string(s), pstate_last_error());
  CHECK(s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_ABORTED, "status %s", pstate_status_string(s));
  int new_rank[64];
  OK(pstate_shrink(ps, new_rank, 64, &(size_t){0}));
  const int dead = env_int("MH_EXPECT_DEAD", -1);
  for (int r = 0, k = 0; r < old_size; ++r) {
    int want = r == dead ? -1 : k++;
    CHECK(new_rank[r] == want, "new_rank[%d] = %d, expected %d", r, new_rank[r], want);
  }
  if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
  g_rank = world.info.rank;
  CHECK(world.size == old_size - 1 && g_rank == new_rank[old_rank], "world of %d, rank %d", world.size, g_rank);
  if (check_all_reduce(&world, PSTATE_FLOAT32, PSTATE_SUM, count, 1)) return 1;
  printf("mh: rank %d (was %d): first exact collective %.0f ms after the failed call\n", g_rank, old_rank,
         now_ms() - failed_at);
  fflush(stdout);
  if (group_suite(&world, 3, 1)) return 1;
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = env_int("MH_TP_AFTER", world.size);
  cfg.pipeline_parallel_size = world.size / cfg.tensor_parallel_size;
  OK(pstate_initialize_model_parallel(ps, &cfg));
  group_t tp;
  if (get_group(ps, PSTATE_GROUP_TP, &tp) || group_suite(&tp, 5, 1)) return 1;
  OK(pstate_destroy_model_parallel(ps));
  OK(pstate_finalize(ps));
  free(buf);
  printf("mh: rank %d: survived: world of %d, %ld checks exact\n", g_rank, world.size, g_checks);
  return 0;
}

/* MH_EXPECT_DEAD as a set: "0,1" -> dead[0] = dead[1] = 1. */
static int parse_dead(int *dead, int n) {
  const char *v = getenv("MH_EXPECT_DEAD");
  int count = 0;
  memset(dead, 0, sizeof(int) * (size_t)n);
  for (const char *p = v; p != NULL && *p;) {
    int r = atoi(p);
    if (r >= 0 && r < n && !dead[r]) dead[r] = 1, ++count;
    p = strchr(p, ',');
    if (p) ++p;
  }
  return count;
}

static int mode_etcd(void) {
  const int replacement = env_int("MH_REPLACEMENT", 0);
  const int timeout = env_int("MH_TIMEOUT_MS", 30000);
  pstate_t *ps = NULL;
  double t_init = now_ms();
  OK(init_from_env(&ps));
  group_t world;
  if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
  g_rank = world.info.rank;
  if (!replacement) {
    const int old_size = world.size, old_rank = g_rank;
    int dead[64];
    const int ndead = parse_dead(dead, old_size);
    size_t count = 16 * 1024;
    float *buf = malloc(count * sizeof(float));
    pstate_status_t s = PSTATE_OK;
    for (long iter = 0; s == PSTATE_OK; ++iter) {
      fill(PSTATE_FLOAT32, buf, count, g_rank, (int)(iter % 5));
      s = pstate_all_reduce(world.g, buf, buf, count, PSTATE_FLOAT32, PSTATE_SUM, NULL);
      if (s != PSTATE_OK) break;
      for (size_t i = 0; i < count; i += 997)
        CHECK(buf[i] == (float)reduce_ref(PSTATE_SUM, world.ranks, world.size, i, (int)(iter % 5)), "loop element %zu", i);
      if (iter == 0) {
        printf("mh: rank %d: looping (init took %.0f ms)\n", g_rank, now_ms() - t_init);
        fflush(stdout);
      }
    }
    const double failed_at = now_ms();
    printf("mh: rank %d: loop ended with %s: %s\n", g_rank, pstate_status_string(s), pstate_last_error());
    fflush(stdout);
    CHECK(s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_ABORTED, "status %s",
          pstate_status_string(s));
    int live[64];
    size_t n = 0;
    OK(pstate_live_ranks(ps, live, 64, &n));
    char text[256] = "";
    for (size_t i = 0; i < n; ++i) snprintf(text + strlen(text), sizeof text - strlen(text), "%s%d", i ? " " : "", live[i]);
    printf("mh: rank %d: live ranks (from the etcd leases) %s\n", g_rank, text);
    size_t k = 0;
    for (int r = 0; r < old_size; ++r) {
      if (dead[r]) continue;
      CHECK(k < n && live[k] == r, "live rank #%zu should be %d (live: %s)", k, r, text);
      ++k;
    }
    CHECK(n == k, "%zu live ranks, expected %zu (live: %s)", n, k, text);
    int new_rank[64];
    OK(pstate_shrink(ps, new_rank, 64, &(size_t){0}));
    for (int r = 0, j = 0; r < old_size; ++r) {
      int want = dead[r] ? -1 : j++;
      CHECK(new_rank[r] == want, "new_rank[%d] = %d, expected %d", r, new_rank[r], want);
    }
    if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
    g_rank = world.info.rank;
    CHECK(world.size == old_size - ndead && g_rank == new_rank[old_rank], "world of %d, rank %d", world.size, g_rank);
    if (check_all_reduce(&world, PSTATE_FLOAT32, PSTATE_SUM, count, 1)) return 1;
    printf("mh: rank %d (was %d): first exact collective %.0f ms after the failed call (world of %d)\n", g_rank,
           old_rank, now_ms() - failed_at, world.size);
    fflush(stdout);
    free(buf);
    const int before = world.size;
    OK(pstate_grow(ps, 60000));
    if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
    g_rank = world.info.rank;
    CHECK(world.size == before + 1, "after pstate_grow: world of %d, expected %d", world.size, before + 1);
  }
  if (check_all_reduce(&world, PSTATE_FLOAT32, PSTATE_SUM, 4096, 2)) return 1;
  if (check_all_reduce(&world, PSTATE_INT64, PSTATE_MAX, 1000, 3)) return 1;
  printf("mh: rank %d: grown: world of %d, exact%s\n", g_rank, world.size, replacement ? " (the replacement)" : "");
  fflush(stdout);
  /* Quorum loss: the script kills a second etcd member, then creates MH_QUORUM_GONE. */
  const char *gone = getenv("MH_QUORUM_GONE");
  if (gone != NULL && *gone) {
    while (access(gone, F_OK) != 0) usleep(20000);
    double t0 = now_ms();
    /* pstate_shrink: every rank asks the store itself (pstate_grow's leader would tell the others) */
    pstate_status_t s = pstate_shrink(ps, NULL, 0, &(size_t){0});
    double took = now_ms() - t0;
    const char *why = pstate_last_error();
    printf("mh: rank %d: without etcd quorum pstate_shrink gave %s after %.0f ms (bound %d ms): %s\n", g_rank,
           pstate_status_string(s), took, timeout + 3000, why);
    CHECK(s == PSTATE_ERR_PEER_LOST, "status %s, expected PEER_LOST", pstate_status_string(s));
    CHECK(strstr(why, "etcd") != NULL, "the error does not name etcd: %s", why);
    CHECK(took <= timeout + 3000, "took %.0f ms (bound %d ms)", took, timeout + 3000);
    OK(pstate_abort(ps));
  } else {
    OK(pstate_finalize(ps));
  }
  printf("mh: rank %d: done\n", g_rank);
  return 0;
}

static int mode_job(void) {
  pstate_t *ps = NULL;
  OK(init_from_env(&ps));
  group_t world;
  if (get_group(ps, PSTATE_GROUP_WORLD, &world)) return 1;
  g_rank = world.info.rank;
  int ops = env_int("MH_OPS", 200), pace = env_int("MH_PACE_MS", 0);
  printf("mh: rank %d: job running\n", g_rank);
  fflush(stdout);
  for (int iter = 0; iter < ops; ++iter) {
    if (check_all_reduce(&world, PSTATE_INT64, PSTATE_SUM, 1 + (size_t)(iter % 3) * 5000, iter)) return 1;
    if (pace > 0) usleep((useconds_t)pace * 1000u);
  }
  OK(pstate_finalize(ps));
  printf("mh: rank %d: job ok, %d checked all-reduces\n", g_rank, ops);
  return 0;
}

static int mode_init_fails(void) {
  int timeout = env_int("MH_TIMEOUT_MS", 30000);
  pstate_t *ps = NULL;
  printf("mh: rank %s: joining\n", getenv("RANK"));
  fflush(stdout);
  double t0 = now_ms();
  pstate_status_t s = init_from_env(&ps);
  double took = now_ms() - t0;
  printf("mh: rank %s: pstate_init -> %s after %.0f ms: %s\n", getenv("RANK"), pstate_status_string(s), took,
         pstate_last_error());
  if (s == PSTATE_OK) {
    pstate_abort(ps);
    return fail("pstate_init succeeded although the store died");
  }
  CHECK(strstr(pstate_last_error(), "store") != NULL, "the message does not name the store: %s", pstate_last_error());
  CHECK(took <= timeout + 2000, "pstate_init took %.0f ms to fail (bound %d ms)", took, timeout + 2000);
  CHECK(ps == NULL, "*out is NULL on error");
  return 0;
}

static int mode_stranger(void) {
  pstate_t *ps = NULL;
  pstate_status_t s = init_from_env(&ps);
  printf("mh: stranger: pstate_init -> %s: %s\n", pstate_status_string(s), pstate_last_error());
  if (s == PSTATE_OK) pstate_abort(ps);
  return s == PSTATE_ERR_AUTH ? 0 : 1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_rank = env_int("RANK", -1);
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "lifecycle") == 0) return mode_lifecycle();
  if (strcmp(mode, "loop") == 0) return mode_loop();
  if (strcmp(mode, "shrink") == 0) return mode_shrink();
  if (strcmp(mode, "job") == 0) return mode_job();
  if (strcmp(mode, "init_fails") == 0) return mode_init_fails();
  if (strcmp(mode, "stranger") == 0) return mode_stranger();
  if (strcmp(mode, "etcd") == 0) return mode_etcd();
  fprintf(stderr, "usage: mh_rank lifecycle|loop|job|init_fails|stranger (see the comment at the top)\n");
  return 2;
}
