/*
 * test_mismatch_matrix.c — ranks that disagree about a collective get an error on every rank,
 * always (issue 17): no rank returns PSTATE_OK, every rank returns PSTATE_ERR_MISMATCH (or
 * PSTATE_ERR_PEER_LOST where a peer finalized instead of calling), within the timeout, and the
 * MISMATCH message names the group and both sides. PSTATE_CHECK is unset: this is the always-on
 * agreement, not the opt-in check.
 *
 * The matrix is generated from tables, never written case by case:
 *
 *   collective (kOps)  x  disagreement that applies to it  x  path (shm, ucx = PSTATE_SHM=0)
 *                      x  size (8 and 65536 elements)       x  ranks (2 and 3 processes)
 *
 * Disagreements: count (N on group rank 0, 2N elsewhere), dtype (float32 vs int32 for
 * reductions, int32 vs int8 for data movement, int32 vs int64 for broadcast), reduce op (SUM on
 * rank 0, MAX elsewhere), root (root 0 on rank 0, root 1 elsewhere), kind (this collective on
 * rank 0, another one on the others: kOps[].partners; reduce against all_reduce and scatter
 * against gather with the same count, dtype and root, so only the kind differs), finalized
 * (rank 1 calls pstate_finalize and exits while the others call the collective), and for
 * all_gatherv / reduce_scatterv counts (the same total cut the other way: {N, 2N, 3N} against
 * {3N, 2N, N}). Rank 0 is always the odd one out.
 *
 * Each case is a fresh job (ranks.h: fresh processes, a free port): the ranks init, agree on one
 * barrier, make the disagreeing call (timed), record what it returned in a shared page, wait
 * until every rank has returned (bounded), call pstate_abort and exit. A rank that does not
 * return is SIGKILLed by the harness and counts as "did not return MISMATCH". Controls (every
 * rank makes the same call) must return OK everywhere, so an error-always library cannot pass.
 *
 * Knobs: PSTATE_MATRIX_FILTER=a,b  run the cases whose name contains a or b (^a: starts with a);
 *                                  names are op/disagreement/path/nSIZE/wRANKS
 *        PSTATE_MATRIX_TIMEOUT_MS  pstate timeout of every rank (default 3000)
 *        PSTATE_MATRIX_VERBOSE=1   one line per case, passing ones too
 *        PSTATE_MATRIX_LIST=1      print the selected cases' names, run nothing
 *        PSTATE_MATRIX_NO_HOLD=1   a rank leaves as soon as its call returns (default: it waits
 *                                  until every rank has returned, so an early exit cannot turn a
 *                                  peer's MISMATCH into PEER_LOST)
 *        PSTATE_MATRIX_CHECK=1     set PSTATE_CHECK=1 in the ranks (validates this harness against
 *                                  the opt-in check; not what CI runs)
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* clang-format off: cmocka.h needs the four above first */
#include <cmocka.h>
/* clang-format on */

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ranks.h"

#define MAX_RANKS 3
#define SLACK_MS 2000 /* a failed call must return within timeout + this */

/* ---- the tables ------------------------------------------------------------------------------ */

typedef enum op_t {
  OP_ALL_REDUCE,
  OP_ALL_GATHER,
  OP_REDUCE_SCATTER,
  OP_BROADCAST,
  OP_GATHER,
  OP_ALL_TO_ALL,
  OP_BARRIER,
  OP_BROADCAST_OBJECT,
  OP_ALL_GATHER_OBJECT,
  OP_REDUCE,
  OP_SCATTER,
  OP_ALL_GATHERV,     /* counts[i] = N * mult * (i + 1), or (world - i) cut the other way */
  OP_REDUCE_SCATTERV, /* the same counts */
  OP_FINALIZE, /* not a collective: what the finalized peer does */
} op_t;

static const char *const kOpName[] = {"all_reduce", "all_gather",        "reduce_scatter", "broadcast",
                                      "gather",     "all_to_all",        "barrier",        "broadcast_object",
                                      "all_gather_object", "reduce",     "scatter",        "all_gatherv",
                                      "reduce_scatterv",   "finalize"};

/* One rank's call. mult: count in units of the case's N (0 = no count: barrier, finalize); the
 * v-collectives' counts are N * mult * (i + 1) for group rank i, or N * mult * (world - i) when
 * root is 1 (the same total cut the other way; they have no root). */
typedef struct call_t {
  op_t op;
  int mult;
  pstate_dtype_t dtype;
  pstate_reduce_op_t rop;
  int root;
} call_t;

#define MAX_PARTNERS 2
typedef struct op_entry_t {
  call_t base;                   /* what every rank calls when they agree */
  pstate_dtype_t alt_dtype;      /* -1: no dtype disagreement */
  int reduces;                   /* reduce-op disagreement applies */
  int rooted;                    /* root disagreement applies */
  int counted;                   /* count disagreement applies */
  call_t partners[MAX_PARTNERS]; /* kind disagreement: rank 0 calls base, the others a partner */
  int n_partners;
  int cut;                       /* counts disagreement (v-collectives): the same total cut otherwise */
} op_entry_t;

#define NO_DT ((pstate_dtype_t)-1)
#define NO_OP ((pstate_reduce_op_t)-1)
#define AR(m, dt) \
  { OP_ALL_REDUCE, m, dt, PSTATE_SUM, -1 }
#define AG(m, dt) \
  { OP_ALL_GATHER, m, dt, NO_OP, -1 }
#define BC(m, dt) \
  { OP_BROADCAST, m, dt, NO_OP, 0 }
#define BAR \
  { OP_BARRIER, 0, NO_DT, NO_OP, -1 }
#define BCO \
  { OP_BROADCAST_OBJECT, 1, PSTATE_INT8, NO_OP, 0 }
#define AGO \
  { OP_ALL_GATHER_OBJECT, 1, PSTATE_INT8, NO_OP, -1 }

static const op_entry_t kOps[] = {
    {AR(1, PSTATE_FLOAT32), PSTATE_INT32, 1, 0, 1, {AG(1, PSTATE_FLOAT32), BAR}, 2, 0},
    {AG(1, PSTATE_INT32), PSTATE_INT8, 0, 0, 1, {AR(1, PSTATE_INT32), AR(2, PSTATE_INT32)}, 2, 0},
    {{OP_REDUCE_SCATTER, 1, PSTATE_FLOAT32, PSTATE_SUM, -1}, PSTATE_INT32, 1, 0, 1, {AR(1, PSTATE_FLOAT32)}, 1, 0},
    {BC(1, PSTATE_INT32), PSTATE_INT64, 0, 1, 1, {AR(1, PSTATE_INT32)}, 1, 0},
    {{OP_GATHER, 1, PSTATE_INT32, NO_OP, 0}, PSTATE_INT8, 0, 1, 1, {AG(1, PSTATE_INT32)}, 1, 0},
    {{OP_ALL_TO_ALL, 1, PSTATE_INT32, NO_OP, -1}, PSTATE_INT8, 0, 0, 1, {AR(1, PSTATE_INT32)}, 1, 0},
    {BAR, NO_DT, 0, 0, 0, {AR(1, PSTATE_FLOAT32)}, 1, 0},
    /* objects: sizes are not agreed in advance (no count disagreement); N int8 = N bytes */
    {BCO, NO_DT, 0, 1, 0, {AGO, BC(1, PSTATE_INT8)}, 2, 0},
    {AGO, NO_DT, 0, 0, 0, {BCO, AG(1, PSTATE_INT8)}, 2, 0},
    /* rooted: the partner differs in nothing but the kind (all_reduce has no root: -1) */
    {{OP_REDUCE, 1, PSTATE_FLOAT32, PSTATE_SUM, 0}, PSTATE_INT32, 1, 1, 1, {AR(1, PSTATE_FLOAT32)}, 1, 0},
    {{OP_SCATTER, 1, PSTATE_INT32, NO_OP, 0}, PSTATE_INT8, 0, 1, 1, {{OP_GATHER, 1, PSTATE_INT32, NO_OP, 0}}, 1, 0},
    /* variable counts: the counts array is agreed too (a hash of it), not only the total */
    {{OP_ALL_GATHERV, 1, PSTATE_INT32, NO_OP, -1}, PSTATE_INT8, 0, 0, 1, {AG(1, PSTATE_INT32)}, 1, 1},
    {{OP_REDUCE_SCATTERV, 1, PSTATE_FLOAT32, PSTATE_SUM, -1}, PSTATE_INT32, 1, 0, 1,
     {{OP_REDUCE_SCATTER, 1, PSTATE_FLOAT32, PSTATE_SUM, -1}}, 1, 1},
};
#define N_OPS (sizeof kOps / sizeof kOps[0])

typedef enum disagree_t { D_NONE, D_COUNT, D_DTYPE, D_ROP, D_ROOT, D_KIND, D_FINALIZED, D_CUT } disagree_t;
static const char *const kDisagreeName[] = {"agree", "count", "dtype", "op", "root", "kind", "finalized", "counts"};

static const size_t kSizes[] = {8, 65536};
static const int kWorlds[] = {2, 3};
static const char *const kPaths[] = {"shm", "ucx"};

typedef struct case_t {
  char name[96];
  disagree_t what;
  call_t first;  /* group rank 0 */
  call_t others; /* every other rank (rank 1 finalizes instead in D_FINALIZED) */
  size_t n;
  int world;
  int ucx;
} case_t;

/* ---- what the ranks report (a page shared across fork) --------------------------------------- */

typedef struct rank_result_t {
  int returned;   /* the call came back (else: killed, crashed, or failed before it) */
  int setup_fail; /* init or the warm-up barrier failed */
  int status;
  double elapsed_ms;
  int msg_ok; /* MISMATCH message names the group and both sides */
  char msg[400];
} rank_result_t;

typedef struct shared_t {
  case_t c;
  int64_t timeout_ms;
  int hold;     /* ranks wait for every rank's return before pstate_abort (see matrix_rank) */
  int returned; /* ranks done with their call (atomic) */
  rank_result_t r[MAX_RANKS];
} shared_t;

static shared_t *g_shared;

/* ---- a rank ---------------------------------------------------------------------------------- */

static int is_v_op(op_t op) {
  return op == OP_ALL_GATHERV || op == OP_REDUCE_SCATTERV;
}

static const char *dtype_name(pstate_dtype_t d) {
  return pstate_dtype_name(d) ? pstate_dtype_name(d) : "?";
}

static void describe_call(const call_t *c, size_t n, char *out, size_t cap) {
  int k = snprintf(out, cap, "%s", kOpName[c->op]);
  if (c->mult > 0) k += snprintf(out + k, cap - (size_t)k, "(%zu %s", n * (size_t)c->mult, dtype_name(c->dtype));
  if (c->mult > 0 && c->rop != NO_OP) k += snprintf(out + k, cap - (size_t)k, " %s", pstate_reduce_op_name(c->rop));
  if (c->mult > 0 && c->root >= 0) k += snprintf(out + k, cap - (size_t)k, " root %d", c->root);
  if (c->mult > 0) snprintf(out + k, cap - (size_t)k, ")");
}

static int is_word(char ch) {
  return isalnum((unsigned char)ch) || ch == '_';
}

/* needle occurs in hay as a whole word ("broadcast" does not match inside "broadcast_object"). */
static int has_word(const char *hay, const char *needle) {
  size_t len = strlen(needle);
  for (const char *p = hay; (p = strcasestr(p, needle)) != NULL; ++p)
    if ((p == hay || !is_word(p[-1])) && !is_word(p[len])) return 1;
  return 0;
}

static int has_number(const char *hay, size_t v) {
  char num[32];
  snprintf(num, sizeof num, "%zu", v);
  return has_word(hay, num);
}

/* "root 1", "src 1", "dst 1", "root=1", "root: 1". */
static int has_root(const char *hay, int root) {
  static const char *const kWords[] = {"root", "src", "dst"};
  for (size_t w = 0; w < 3; ++w) {
    size_t len = strlen(kWords[w]);
    for (const char *p = hay; (p = strcasestr(p, kWords[w])) != NULL; ++p) {
      if (p != hay && is_word(p[-1])) continue;
      const char *q = p + len;
      while (*q == ' ' || *q == '=' || *q == ':') ++q;
      if (isdigit((unsigned char)*q) && atoi(q) == root && !isdigit((unsigned char)q[1])) return 1;
    }
  }
  return 0;
}

/* The MISMATCH message names the group and both sides' descriptors (what differs). */
static int message_names_both_sides(const case_t *c, const char *group, const char *msg) {
  if (strstr(msg, group) == NULL) return 0;
  if (!has_word(msg, kOpName[c->first.op])) return 0;
  /* the v-collectives are described by their totals */
  const size_t per = is_v_op(c->first.op) ? (size_t)c->world * (size_t)(c->world + 1) / 2 : 1;
  switch (c->what) {
    case D_COUNT:
      return has_number(msg, c->n * (size_t)c->first.mult * per) && has_number(msg, c->n * (size_t)c->others.mult * per);
    case D_CUT: { /* both sides' counts hashes: "... counts 5f3a09c1, ... counts 1e0b77d2" */
      const char *at = strstr(msg, " counts ");
      return at != NULL && strstr(at + 1, " counts ") != NULL;
    }
    case D_DTYPE:
      return has_word(msg, dtype_name(c->first.dtype)) && has_word(msg, dtype_name(c->others.dtype));
    case D_ROP:
      return has_word(msg, pstate_reduce_op_name(c->first.rop)) && has_word(msg, pstate_reduce_op_name(c->others.rop));
    case D_ROOT:
      return has_root(msg, c->first.root) && has_root(msg, c->others.root);
    case D_KIND:
      return has_word(msg, kOpName[c->others.op]);
    default:
      return 1; /* finalized: the other side is a teardown; naming the collective is enough */
  }
}

static void v_counts(const call_t *c, size_t n, int world, size_t *counts) {
  for (int i = 0; i < world; ++i) counts[i] = n * (size_t)c->mult * (size_t)(c->root == 1 ? world - i : i + 1);
}

static pstate_status_t issue(pstate_t **ps, pstate_group_t *g, const call_t *c, size_t n, int rank, int world,
                             char *send, char *recv) {
  size_t count = n * (size_t)c->mult;
  size_t counts[MAX_RANKS];
  if (is_v_op(c->op)) v_counts(c, n, world, counts);
  switch (c->op) {
    case OP_ALL_REDUCE:
      return pstate_all_reduce(g, send, recv, count, c->dtype, c->rop, NULL);
    case OP_ALL_GATHER:
      return pstate_all_gather(g, send, recv, count, c->dtype, NULL);
    case OP_REDUCE_SCATTER:
      return pstate_reduce_scatter(g, send, recv, count, c->dtype, c->rop, NULL);
    case OP_BROADCAST:
      return pstate_broadcast(g, rank == c->root ? send : recv, count, c->dtype, c->root, NULL);
    case OP_GATHER:
      return pstate_gather(g, send, recv, count, c->dtype, c->root, NULL);
    case OP_ALL_TO_ALL:
      return pstate_all_to_all(g, send, recv, count, c->dtype, NULL);
    case OP_BARRIER:
      return pstate_barrier(g);
    case OP_BROADCAST_OBJECT: {
      pstate_bytes_t out = {NULL, 0};
      pstate_status_t s = pstate_broadcast_object(g, send, count, c->root, &out);
      pstate_bytes_free(&out);
      return s;
    }
    case OP_ALL_GATHER_OBJECT: {
      pstate_bytes_t out = {NULL, 0};
      size_t sizes[MAX_RANKS];
      pstate_status_t s = pstate_all_gather_object(g, send, count, &out, sizes, MAX_RANKS, &(size_t){0});
      pstate_bytes_free(&out);
      return s;
    }
    case OP_REDUCE:
      return pstate_reduce(g, send, recv, count, c->dtype, c->rop, c->root, NULL);
    case OP_SCATTER:
      return pstate_scatter(g, send, recv, count, c->dtype, c->root, NULL);
    case OP_ALL_GATHERV:
      return pstate_all_gatherv(g, send, recv, counts, c->dtype, NULL);
    case OP_REDUCE_SCATTERV:
      return pstate_reduce_scatterv(g, send, recv, counts, c->dtype, c->rop, NULL);
    case OP_FINALIZE: {
      pstate_status_t s = pstate_finalize(*ps);
      *ps = NULL;
      return s;
    }
  }
  return PSTATE_ERR_INTERNAL;
}

static int matrix_rank(const pstate_test_rank_t *self) {
  const case_t *c = &g_shared->c;
  rank_result_t *res = &g_shared->r[self->rank];
  if (c->ucx) setenv("PSTATE_SHM", "0", 1);
  const call_t *mine = self->rank == 0 ? &c->first : &c->others;
  call_t finalize = {OP_FINALIZE, 0, NO_DT, NO_OP, -1};
  if (c->what == D_FINALIZED && self->rank == 1) mine = &finalize;

  /* room for the largest call: 2N int64 per rank of the world, on both sides */
  size_t bytes = c->n * 2 * 8 * MAX_RANKS;
  char *send = malloc(bytes), *recv = malloc(bytes);
  if (send == NULL || recv == NULL) return 1;
  memset(send, self->rank + 1, bytes);
  memset(recv, 0, bytes);

  pstate_t *ps = NULL;
  pstate_group_t *world = NULL;
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  pstate_status_t s = pstate_test_init(self, g_shared->timeout_ms, &ps);
  if (s == PSTATE_OK) s = pstate_get_group(ps, PSTATE_GROUP_WORLD, &world);
  if (s == PSTATE_OK) s = pstate_group_info(world, &info);
  if (s == PSTATE_OK) s = pstate_barrier(world); /* everyone is up; the next call is the disagreement */
  if (s != PSTATE_OK) {
    res->setup_fail = 1;
    res->status = s;
    snprintf(res->msg, sizeof res->msg, "setup: %s", pstate_last_error());
    __atomic_add_fetch(&g_shared->returned, 1, __ATOMIC_SEQ_CST);
    pstate_abort(ps);
    return 0;
  }

  double t0 = pstate_test_now_ms();
  s = issue(&ps, world, mine, c->n, self->rank, c->world, send, recv);
  res->elapsed_ms = pstate_test_now_ms() - t0;
  res->status = s;
  snprintf(res->msg, sizeof res->msg, "%s", s == PSTATE_OK ? "" : pstate_last_error());
  res->msg_ok = s != PSTATE_ERR_MISMATCH || c->what == D_NONE || message_names_both_sides(c, info.name, res->msg);
  res->returned = 1;
  __atomic_add_fetch(&g_shared->returned, 1, __ATOMIC_SEQ_CST);
  /* Hold: a rank that detected the disagreement first must not make its peers' answer PEER_LOST
   * by exiting before they have theirs; what is measured is agreement, not a race with exit. So
   * every rank but the finalizer (which leaves at once, as the case says) waits for every other
   * rank's return, or for the bound, before pstate_abort. PSTATE_MATRIX_NO_HOLD=1: leave at once. */
  while (g_shared->hold && ps != NULL && __atomic_load_n(&g_shared->returned, __ATOMIC_SEQ_CST) < c->world &&
         pstate_test_now_ms() - t0 < (double)g_shared->timeout_ms + SLACK_MS)
    usleep(1000);
  if (ps != NULL) pstate_abort(ps);
  free(send);
  free(recv);
  return 0;
}

/* ---- generating and judging the cases -------------------------------------------------------- */

static void add_cases(case_t *cases, size_t *n_cases, size_t cap, const char *op, const char *what, disagree_t d,
                      call_t first, call_t others, size_t first_world) {
  for (size_t p = 0; p < 2; ++p)
    for (size_t z = 0; z < sizeof kSizes / sizeof kSizes[0]; ++z)
      for (size_t w = first_world; w < sizeof kWorlds / sizeof kWorlds[0]; ++w) {
        /* no count on either side (barrier against barrier or finalize): no size dimension */
        int sizeless = first.mult == 0 && (others.mult == 0 || d == D_FINALIZED);
        if (z > 0 && sizeless) continue;
        assert_true(*n_cases < cap);
        case_t *c = &cases[(*n_cases)++];
        memset(c, 0, sizeof *c);
        c->what = d;
        c->first = first;
        c->others = others;
        c->n = kSizes[z];
        c->world = kWorlds[w];
        c->ucx = (int)p;
        char size[24] = "";
        if (!sizeless) snprintf(size, sizeof size, "n%zu/", c->n);
        snprintf(c->name, sizeof c->name, "%s/%s/%s/%sw%d", op, what, kPaths[p], size, c->world);
      }
}

static void add_case(case_t *cases, size_t *n_cases, size_t cap, const char *op, const char *what, disagree_t d,
                     call_t first, call_t others) {
  add_cases(cases, n_cases, cap, op, what, d, first, others, 0);
}

static size_t build_matrix(case_t *cases, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < N_OPS; ++i) {
    const op_entry_t *e = &kOps[i];
    const char *op = kOpName[e->base.op];
    call_t other = e->base;
    if (e->counted) {
      other = e->base;
      other.mult = 2;
      add_case(cases, &n, cap, op, kDisagreeName[D_COUNT], D_COUNT, e->base, other);
    }
    if (e->alt_dtype != NO_DT) {
      other = e->base;
      other.dtype = e->alt_dtype;
      add_case(cases, &n, cap, op, kDisagreeName[D_DTYPE], D_DTYPE, e->base, other);
    }
    if (e->reduces) {
      other = e->base;
      other.rop = PSTATE_MAX;
      add_case(cases, &n, cap, op, kDisagreeName[D_ROP], D_ROP, e->base, other);
    }
    if (e->rooted) {
      other = e->base;
      other.root = 1;
      add_case(cases, &n, cap, op, kDisagreeName[D_ROOT], D_ROOT, e->base, other);
    }
    if (e->cut) {
      other = e->base;
      other.root = 1; /* v_counts: the other cut */
      add_case(cases, &n, cap, op, kDisagreeName[D_CUT], D_CUT, e->base, other);
    }
    for (int k = 0; k < e->n_partners; ++k) {
      const call_t *p = &e->partners[k];
      char what[48];
      snprintf(what, sizeof what, "%s-%s%s", kDisagreeName[D_KIND], kOpName[p->op], p->mult == 2 ? "-2N" : "");
      add_case(cases, &n, cap, op, what, D_KIND, e->base, *p);
    }
    add_case(cases, &n, cap, op, kDisagreeName[D_FINALIZED], D_FINALIZED, e->base, e->base);
  }
  return n;
}

static size_t build_controls(case_t *cases, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < N_OPS; ++i)
    add_cases(cases, &n, cap, kOpName[kOps[i].base.op], kDisagreeName[D_NONE], D_NONE, kOps[i].base, kOps[i].base,
              1); /* 3 ranks */
  return n;
}

static int selected(const char *name) {
  const char *f = getenv("PSTATE_MATRIX_FILTER");
  if (f == NULL || *f == '\0') return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", f);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
    if (tok[0] == '^' ? strncmp(name, tok + 1, strlen(tok + 1)) == 0 : strstr(name, tok) != NULL) return 1;
  return 0;
}

static int64_t timeout_ms(void) {
  const char *t = getenv("PSTATE_MATRIX_TIMEOUT_MS");
  return t != NULL && atoll(t) > 0 ? atoll(t) : 3000;
}

static int verbose(void) {
  const char *v = getenv("PSTATE_MATRIX_VERBOSE");
  return v != NULL && *v != '\0' && *v != '0';
}

typedef struct verdict_t {
  int some_ok;       /* a rank that disagreed returned OK */
  int not_all_error; /* some rank did not return MISMATCH (PEER_LOST: finalized) in time */
  int bad_message;   /* a MISMATCH message misses the group or a side */
} verdict_t;

static verdict_t judge(const shared_t *sh) {
  const case_t *c = &sh->c;
  verdict_t v = {0, 0, 0};
  double bound = (double)sh->timeout_ms + SLACK_MS;
  for (int r = 0; r < c->world; ++r) {
    const rank_result_t *res = &sh->r[r];
    int finalizer = c->what == D_FINALIZED && r == 1;
    if (!res->returned || res->elapsed_ms > bound) { /* hung, crashed, setup failed, or late */
      v.not_all_error = 1;
      continue;
    }
    if (finalizer) continue; /* its pstate_finalize may return what it likes, but must return */
    int s = res->status;
    if (c->what == D_NONE) {
      if (s != PSTATE_OK) v.not_all_error = 1;
      continue;
    }
    if (s == PSTATE_OK) v.some_ok = 1;
    if (!(s == PSTATE_ERR_MISMATCH || (c->what == D_FINALIZED && s == PSTATE_ERR_PEER_LOST))) v.not_all_error = 1;
    if (!res->msg_ok) v.bad_message = 1;
  }
  return v;
}

static void print_case(const shared_t *sh, verdict_t v, int failed) {
  const case_t *c = &sh->c;
  char a[64], b[64];
  describe_call(&c->first, c->n, a, sizeof a);
  describe_call(&c->others, c->n, b, sizeof b);
  printf("%s %s  [rank 0: %s; others: %s%s]%s%s%s\n", failed ? "FAIL" : "ok  ", c->name, a, b,
         c->what == D_FINALIZED ? "; rank 1: finalize" : "", v.some_ok ? " OK-among-mismatched" : "",
         v.not_all_error ? " not-all-error" : "", v.bad_message ? " message-misses-a-side" : "");
  for (int r = 0; r < c->world; ++r) {
    const rank_result_t *res = &sh->r[r];
    if (res->setup_fail)
      printf("    rank %d: setup failed: %s: %s\n", r, pstate_status_string(res->status), res->msg);
    else if (!res->returned)
      printf("    rank %d: did not return (killed by the harness or crashed)\n", r);
    else
      printf("    rank %d: %s in %.0f ms%s%s\n", r, pstate_status_string(res->status), res->elapsed_ms,
             res->msg[0] ? ": " : "", res->msg);
  }
}

typedef struct tally_t {
  int cases, with_ok, not_all_error, bad_message;
  double wall_ms;
} tally_t;

static tally_t run_cases(const case_t *cases, size_t n) {
  tally_t t = {0, 0, 0, 0, 0.0};
  int64_t tmo = timeout_ms();
  /* the harness kills a rank at: start-up + timeout + slack, rounded up */
  int kill_s = (int)((tmo + SLACK_MS + 999) / 1000) + 5;
  double start = pstate_test_now_ms();
  for (size_t i = 0; i < n; ++i) {
    if (!selected(cases[i].name)) continue;
    if (getenv("PSTATE_MATRIX_LIST") != NULL) {
      printf("%s\n", cases[i].name);
      continue;
    }
    memset(g_shared, 0, sizeof *g_shared);
    g_shared->c = cases[i];
    g_shared->timeout_ms = tmo;
    g_shared->hold = getenv("PSTATE_MATRIX_NO_HOLD") == NULL;
    int statuses[MAX_RANKS];
    pstate_test_run_processes(cases[i].world, kill_s, matrix_rank, NULL, statuses);
    verdict_t v = judge(g_shared);
    int failed = v.some_ok || v.not_all_error || v.bad_message;
    t.cases++;
    t.with_ok += v.some_ok;
    t.not_all_error += v.not_all_error;
    t.bad_message += v.bad_message;
    if (failed || verbose()) print_case(g_shared, v, failed);
    fflush(stdout);
  }
  t.wall_ms = pstate_test_now_ms() - start;
  return t;
}

/* ---- the tests ------------------------------------------------------------------------------- */

#define MAX_CASES 512

static void test_disagreeing_ranks_all_get_mismatch_never_ok(void **state) {
  (void)state;
  static case_t cases[MAX_CASES];
  size_t n = build_matrix(cases, MAX_CASES);
  tally_t t = run_cases(cases, n);
  printf(
      "matrix: %d cases, %d with an OK among mismatched calls, %d where some rank did not return "
      "MISMATCH/PEER_LOST\n",
      t.cases, t.with_ok, t.not_all_error);
  printf("matrix: %d with a MISMATCH message that misses the group or a side; timeout %lld ms; %.1f s%s\n",
         t.bad_message, (long long)timeout_ms(), t.wall_ms / 1e3,
         getenv("PSTATE_CHECK") ? " (PSTATE_CHECK=1: harness validation, not the always-on agreement)" : "");
  fflush(stdout);
  assert_int_equal(t.with_ok, 0);
  assert_int_equal(t.not_all_error, 0);
  assert_int_equal(t.bad_message, 0);
}

/* Every rank makes the same call: OK everywhere (the matrix cannot pass by failing everything). */
static void test_agreeing_ranks_all_get_ok(void **state) {
  (void)state;
  static case_t cases[MAX_CASES];
  size_t n = build_controls(cases, MAX_CASES);
  tally_t t = run_cases(cases, n);
  printf("controls: %d cases, %d where some rank did not return OK; %.1f s\n", t.cases, t.not_all_error,
         t.wall_ms / 1e3);
  fflush(stdout);
  assert_int_equal(t.not_all_error, 0);
}

int main(void) {
  g_shared = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_shared == MAP_FAILED) return 1;
  const char *check = getenv("PSTATE_MATRIX_CHECK");
  if (check != NULL && strcmp(check, "1") == 0)
    setenv("PSTATE_CHECK", "1", 1);
  else
    unsetenv("PSTATE_CHECK"); /* the agreement under test is the always-on one */
  unsetenv("PSTATE_SHM");     /* each case picks its path */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_agreeing_ranks_all_get_ok),
      cmocka_unit_test(test_disagreeing_ranks_all_get_mismatch_never_ok),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
