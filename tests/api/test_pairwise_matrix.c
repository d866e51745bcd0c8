/*
 * test_pairwise_matrix.c — no wrong answer between operations of different kinds (issue 27):
 * for every ordered pair (A, B) of the header's operations that send anything, A on some ranks
 * and B on the others, no rank may return PSTATE_OK with the data of another call. Sibling of
 * test_mismatch_matrix.c (which varies count, dtype, op and root within one collective): here
 * every operation meets every other one, with the same element type and size everywhere, so only
 * the kind tells them apart.
 *
 * Operations (kOps; every one on the world group, group rank = world rank, int32 elements, N of
 * them per message, N = PSTATE_PAIRWISE_N, default 16):
 *
 *   collectives (every rank calls; root/src/dst 0):  all_reduce (SUM), all_gather,
 *     reduce_scatter (SUM), broadcast, gather, all_to_all, reduce (SUM), scatter, all_gatherv and
 *     reduce_scatterv (counts N on every rank, so their bytes look like all_gather's and
 *     reduce_scatter's), barrier, broadcast_object (4N bytes), all_gather_object (4N bytes from
 *     each rank), broadcast_tensor_dict (the dict below), new_group (every rank passes the whole
 *     world), initialize_model_parallel (tp = world)
 *   point-to-point, rank 0 the hub: rank 0 talks to ranks 1..W-1 (in that order, one message
 *     each), every other rank talks to rank 0 only:
 *     send, recv, isend (+ wait), irecv (+ wait), p2p_batch (a send to and a receive from each of
 *     those peers in one batch), send_object / recv_object (4N bytes), send_tensor_dict /
 *     recv_tensor_dict and send_tensor_dict_sliced / recv_tensor_dict_sliced (ag = this rank's
 *     own singleton group, made by pstate_new_group in every case's set-up, so the sliced path
 *     runs with whole tensors and needs no second stage)
 *
 *   pstate_tp_allreduce / pstate_tp_allgather have no rows: they are pstate_all_reduce /
 *   pstate_all_gather on the TP group (src/api/api_ops.cpp), the same calls as the rows above.
 *
 * Dict: "hidden" int32 [N] and "mask" uint8 [1, N]; every dict class has the same names, shapes
 * and dtypes, so only the data tell a broadcast dict, a p2p dict and a sliced dict apart.
 *
 * Cases (generated, never written one by one):
 *   path (shm; ucx = PSTATE_SHM=0) x world and split:
 *     w2      A on rank 0, B on rank 1
 *     w3      A on rank 0, B on ranks 1 and 2
 *     w3-a01  A on ranks 0 and 1, B on rank 2: the root/hub and a peer agree and complete what
 *             they can between them while rank 2 alone disagrees (new_group on 0,1 against
 *             all_gather_object on 2; a p2p exchange between 0 and 1 beside rank 2's call).
 *             Not in the default run (PSTATE_PAIRWISE_SPLITS=all adds it): on main at 6dd6a27 it
 *             failed in no cell where w3 passes, and its 1404 cases would add half again to the
 *             time this test takes in CI
 *   x every ordered pair A != B of kOps, and A == B for the operations that agree with themselves
 *   (every collective and p2p_batch). Controls: the cases where the calls agree (A == B; and in
 *   w2/w3 {send, isend} against {recv, irecv}, send_object against recv_object, send_tensor_dict
 *   against recv_tensor_dict, the sliced pair, each in both directions): every rank must return
 *   OK with exactly its reference data, so a harness or a library that fails everything cannot
 *   pass. Every other case is a disagreeing one. A == B for send, recv, isend, ... (everyone sends,
 *   or everyone receives) is no pair of kinds and is not a case.
 *
 * Data: everything a rank sends is word(class, sender, receiver, field, index), a hash; the class
 * is the operation for collectives, and one class per stream that the header defines as shared:
 * tensor point-to-point (send, isend and p2p_batch's sends match recv, irecv and p2p_batch's
 * receives in any mix, by the header's per-peer order), objects, p2p dicts, sliced dicts. A rank
 * whose call returns OK checks every output against a reference computed here, independently of
 * the library, as if its partners had made the matching call: objects byte for byte, dicts key
 * by key (name, dtype, shape, size, bytes). So an OK whose outputs came from another call, or
 * from pstate's own traffic, cannot pass unnoticed.
 *
 * Verdicts, per rank, then per case:
 *   ok-exact     OK, outputs equal the reference (a p2p receive matched by another p2p kind of
 *                the same stream is exact by design)
 *   ok-sent      OK from a call whose outputs on this rank do not come from peers (send, isend,
 *                send_object, the send dicts; the roots of broadcast/broadcast_object/
 *                broadcast_tensor_dict/scatter, the non-roots of gather/reduce): its message left;
 *                allowed, counted
 *   OK-FOREIGN   OK with outputs that differ from the reference: the data of another call. Must be 0
 *   OK-UNPAIRED  OK from barrier, new_group or initialize_model_parallel (nothing to compare: they
 *                complete only when every rank made them) in a case where some rank did not:
 *                they completed on another call's messages. Must be 0
 *   expected     MISMATCH, PEER_LOST, TIMEOUT or ABORTED, within timeout + 2 s
 *   OTHER-ERROR  any other status (INVALID_ARGUMENT, NO_MEMORY, INTERNAL, ...). Every call here
 *                has valid arguments, so such an error comes from reading another call's bytes as
 *                this call's arguments or metadata (new_group against all_gather_object: "rank 1
 *                passed {1883225364471023337, ...}: not a world rank"): it blames the wrong thing
 *                and its text misleads. Must be 0
 *   HUNG         no return within timeout + 2 s (late, killed by the harness bound, or crashed),
 *                on the first try and again on a rerun at the end, at a quarter of the pace. A
 *                rank starved of CPU for seconds by other work on the machine is not a hang: the
 *                time the rank, and at most the longest of its peers, were runnable without a CPU
 *                (the kernel's schedstat run delay) is not counted; both tries are printed
 *   SETUP        init, the ag group or the warm-up barrier failed (retried twice: a port taken
 *                meanwhile by another process); a case that never sets up fails
 *   CONTROL-BAD  a control where some rank did not end ok-exact / ok-sent / OK
 *
 * Each case is a fresh job (ranks.h: fresh processes, a token of its own; here also a
 * PSTATE_JOB_ID of its own and a free port that no other running job has, passed to ranks.h as
 * PSTATE_TEST_MASTER_PORT: two free-port probes at once can return the same port, and then the
 * second job's ranks are refused by the first one's store), so a failed case cannot leak into
 * the next. Jobs run concurrently (PSTATE_PAIRWISE_JOBS, default 12): a runner process per case
 * forks the ranks through pstate_test_run_processes and the ranks write into the runner's slot
 * of a shared page; the
 * ranks init, make the ag group, agree on one barrier, make their call (timed), check their
 * outputs, record status, time, pstate_last_error() and the first difference, then hold until
 * every rank of the job has returned (bounded by timeout + 2 s) before pstate_abort, so an early
 * exit cannot turn a peer's answer into PEER_LOST. Waiting ranks sleep (pstate's waits block;
 * the hold polls every 5 ms). A rank that never returns is SIGKILLed by the harness bound.
 *
 * The ranks' flight-recorder dumps go to a folder of the run under /dev/shm (removed at the end;
 * PSTATE_TRACE_DIR, when set, is kept): see trace_dir_make.
 *
 * Knobs: PSTATE_PAIRWISE_FILTER=a,b     cases whose name contains a or b (^a: starts with a; a$:
 *                                       ends with a); names are A/B/path/split, e.g.
 *                                       send/recv_object/ucx/w3-a01
 *        PSTATE_PAIRWISE_TIMEOUT_MS     pstate timeout of every rank (default 500; init has 30 s)
 *        PSTATE_PAIRWISE_JOBS           cases run at once (default 12)
 *        PSTATE_PAIRWISE_N              elements per message (default 16; 65536 takes the
 *                                       rendezvous and staged paths)
 *        PSTATE_PAIRWISE_SPLITS         the splits to run: w2,w3 (default), w3-a01, or all
 *        PSTATE_PAIRWISE_OPS=a,b,...    only pairs of these operations (default: all of kOps)
 *        PSTATE_PAIRWISE_VERBOSE=1      every case, each rank's status, time, message
 *        PSTATE_PAIRWISE_LIST=1         print the selected cases' names, run nothing
 *        PSTATE_PAIRWISE_GRID=0         leave out the per-path grids
 *        PSTATE_PAIRWISE_NO_HOLD=1      a rank leaves as soon as its call returns
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* clang-format off: cmocka.h needs the four above first */
#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

#define MAX_RANKS 3
#define SLACK_MS 2000                /* an erroring call must return within timeout + this */
#define MAX_GOT 4                    /* tensors a receiving rank records; more is foreign */
#define MAX_ALLOC ((size_t)64 << 20) /* alloc refuses more (foreign metadata): NO_MEMORY */
#define SETUP_RETRIES 2
/* Jobs at once. Most waiting is a rank asleep until its timeout (over half the cases end in
 * TIMEOUT, 1 s each), the rest is start-up CPU (~0.1-0.15 CPU-s a case): 12 keeps 2 cores busy. */
#define DEFAULT_JOBS 12

/* ---- the operations ------------------------------------------------------------------------- */

typedef enum op_t {
  OP_ALL_REDUCE,
  OP_ALL_GATHER,
  OP_REDUCE_SCATTER,
  OP_BROADCAST,
  OP_GATHER,
  OP_ALL_TO_ALL,
  OP_REDUCE,
  OP_SCATTER,
  OP_ALL_GATHERV,
  OP_REDUCE_SCATTERV,
  OP_BARRIER,
  OP_BROADCAST_OBJECT,
  OP_ALL_GATHER_OBJECT,
  OP_BROADCAST_TENSOR_DICT,
  OP_NEW_GROUP,
  OP_INIT_MODEL_PARALLEL,
  OP_SEND, /* the point-to-point operations start here (is_p2p) */
  OP_RECV,
  OP_ISEND,
  OP_IRECV,
  OP_P2P_BATCH,
  OP_SEND_OBJECT,
  OP_RECV_OBJECT,
  OP_SEND_TENSOR_DICT,
  OP_RECV_TENSOR_DICT,
  OP_SEND_DICT_SLICED,
  OP_RECV_DICT_SLICED,
  N_OPS
} op_t;

static const char *const kOpName[N_OPS] = {"all_reduce",
                                           "all_gather",
                                           "reduce_scatter",
                                           "broadcast",
                                           "gather",
                                           "all_to_all",
                                           "reduce",
                                           "scatter",
                                           "all_gatherv",
                                           "reduce_scatterv",
                                           "barrier",
                                           "broadcast_object",
                                           "all_gather_object",
                                           "broadcast_tensor_dict",
                                           "new_group",
                                           "initialize_model_parallel",
                                           "send",
                                           "recv",
                                           "isend",
                                           "irecv",
                                           "p2p_batch",
                                           "send_object",
                                           "recv_object",
                                           "send_tensor_dict",
                                           "recv_tensor_dict",
                                           "send_tensor_dict_sliced",
                                           "recv_tensor_dict_sliced"};

/* Data classes beyond the operations: the streams that several operations share by design. */
enum { CLS_P2P = N_OPS, CLS_OBJECT, CLS_DICT, CLS_SLICED };

static int is_p2p(op_t op) {
  return op >= OP_SEND;
}

/* Calls that agree with themselves on every rank (a control when A == B). */
static int self_agreeing(op_t op) {
  return !is_p2p(op) || op == OP_P2P_BATCH;
}

/* Calls with nothing to compare: they complete only when every rank makes them. */
static int is_sync(op_t op) {
  return op == OP_BARRIER || op == OP_NEW_GROUP || op == OP_INIT_MODEL_PARALLEL;
}

/* Point-to-point kinds that agree across the hub (either side may be rank 0's). */
static const op_t kAgreeing[][2] = {
    {OP_SEND, OP_RECV},
    {OP_SEND, OP_IRECV},
    {OP_ISEND, OP_RECV},
    {OP_ISEND, OP_IRECV},
    {OP_SEND_OBJECT, OP_RECV_OBJECT},
    {OP_SEND_TENSOR_DICT, OP_RECV_TENSOR_DICT},
    {OP_SEND_DICT_SLICED, OP_RECV_DICT_SLICED},
};

static int cross_agreeing(op_t a, op_t b) {
  for (size_t i = 0; i < sizeof kAgreeing / sizeof kAgreeing[0]; ++i)
    if ((kAgreeing[i][0] == a && kAgreeing[i][1] == b) || (kAgreeing[i][0] == b && kAgreeing[i][1] == a)) return 1;
  return 0;
}

/* Whether this rank's outputs come from its peers (else an OK is "its message left"). */
static int peer_output(op_t op, int rank) {
  switch (op) {
    case OP_BROADCAST:
    case OP_SCATTER:
    case OP_BROADCAST_OBJECT:
    case OP_BROADCAST_TENSOR_DICT:
      return rank != 0;
    case OP_GATHER:
    case OP_REDUCE:
      return rank == 0;
    case OP_SEND:
    case OP_ISEND:
    case OP_SEND_OBJECT:
    case OP_SEND_TENSOR_DICT:
    case OP_SEND_DICT_SLICED:
      return 0;
    default:
      return !is_sync(op);
  }
}

/* ---- the cases ----------------------------------------------------------------------------- */

static const char *const kPaths[] = {"shm", "ucx"};

typedef enum split_t { SPLIT_W2, SPLIT_W3, SPLIT_W3_A01, N_SPLITS } split_t;
static const char *const kSplitName[N_SPLITS] = {"w2", "w3", "w3-a01"};
static const int kSplitWorld[N_SPLITS] = {2, 3, 3};
static const int kSplitRanksA[N_SPLITS] = {1, 1, 2}; /* A on ranks [0, this), B on the others */

typedef struct case_t {
  char name[72];
  op_t a, b;
  split_t split;
  int world;
  int n_a;
  int ucx;
  int control; /* the calls agree: every rank must end OK with exact data */
} case_t;

/* ---- what the ranks report (a page shared across fork) ------------------------------------- */

typedef enum got_t { GOT_NONE, GOT_EXACT, GOT_SENT, GOT_SYNC, GOT_FOREIGN } got_t;

typedef struct rank_result_t {
  int returned;   /* the call came back (else: killed, crashed, or failed before it) */
  int setup_fail; /* init, the ag group or the warm-up barrier failed */
  int status;
  double elapsed_ms;
  double starved_ms; /* of elapsed_ms, the time this rank was runnable but had no CPU */
  int got;           /* got_t, for status OK */
  char msg[240];     /* pstate_last_error() of the first failed call */
  char detail[160];  /* the first difference from the reference (GOT_FOREIGN) */
} rank_result_t;

typedef struct slot_t {
  case_t c;
  size_t n;
  int64_t timeout_ms;
  int hold;
  int returned; /* ranks done with their call (atomic) */
  rank_result_t r[MAX_RANKS];
  int statuses[MAX_RANKS]; /* each rank's wait status, from the runner */
} slot_t;

static slot_t *g_slots; /* one per concurrent job */
static slot_t *g_slot;  /* the slot of this runner and its ranks */

/* ---- data ---------------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* What `src` sends to `dst` (-1: every rank) at `index` of `field` in data class `cls`: 15 bits,
 * so a sum over three ranks stays far inside int32. */
static int32_t word(int cls, int src, int dst, int field, size_t index) {
  uint64_t key = ((uint64_t)cls << 48) ^ ((uint64_t)(src + 1) << 40) ^ ((uint64_t)(dst + 2) << 32) ^
                 ((uint64_t)field << 28) ^ (uint64_t)index;
  return (int32_t)(mix64(key) & 0x7fff);
}

static uint8_t byte_of(int cls, int src, int dst, size_t index) {
  return (uint8_t)(word(cls, src, dst, 7, index) >> 3);
}

#define SENTINEL ((int32_t)0xa5a5a5a5)

static void fill_words(int32_t *p, size_t n, int cls, int src, int dst, size_t first) {
  for (size_t i = 0; i < n; ++i) p[i] = word(cls, src, dst, 0, first + i);
}

static void fill_sentinel(int32_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = SENTINEL;
}

/* A dict as its sender describes it. */
typedef struct dict_t {
  int32_t *hidden;
  uint8_t *mask;
  int64_t hidden_shape[1], mask_shape[2];
  pstate_tensor_t t[2];
} dict_t;

static int dict_make(dict_t *d, int cls, int src, int dst, size_t n) {
  d->hidden = malloc(n * sizeof(int32_t) + 1);
  d->mask = malloc(n + 1);
  if (d->hidden == NULL || d->mask == NULL) return 0;
  for (size_t i = 0; i < n; ++i) {
    d->hidden[i] = word(cls, src, dst, 1, i);
    d->mask[i] = (uint8_t)word(cls, src, dst, 2, i);
  }
  d->hidden_shape[0] = (int64_t)n;
  d->mask_shape[0] = 1;
  d->mask_shape[1] = (int64_t)n;
  pstate_tensor_t h = PSTATE_TENSOR_INIT, m = PSTATE_TENSOR_INIT;
  h.name = "hidden";
  h.dtype = PSTATE_INT32;
  h.ndim = 1;
  h.shape = d->hidden_shape;
  h.data = d->hidden;
  m.name = "mask";
  m.dtype = PSTATE_UINT8;
  m.ndim = 2;
  m.shape = d->mask_shape;
  m.data = d->mask;
  d->t[0] = h;
  d->t[1] = m;
  return 1;
}

static void dict_free(dict_t *d) {
  free(d->hidden);
  free(d->mask);
}

/* A dict as the receiving side's allocation callback saw it. */
typedef struct got_dict_t {
  int calls;
  struct {
    char name[32];
    pstate_dtype_t dtype;
    int ndim;
    int64_t shape[2];
    size_t bytes;
    void *mem;
  } t[MAX_GOT];
} got_dict_t;

static void *record_alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                          size_t bytes, pstate_device_t device) {
  (void)device;
  got_dict_t *g = user;
  int i = g->calls++;
  if (i >= MAX_GOT || bytes > MAX_ALLOC) return NULL;
  snprintf(g->t[i].name, sizeof g->t[i].name, "%s", name != NULL ? name : "(null)");
  g->t[i].dtype = dtype;
  g->t[i].ndim = ndim;
  for (int k = 0; k < 2; ++k) g->t[i].shape[k] = k < ndim && shape != NULL ? shape[k] : -1;
  g->t[i].bytes = bytes;
  g->t[i].mem = malloc(bytes > 0 ? bytes : 1);
  if (g->t[i].mem != NULL) memset(g->t[i].mem, 0xa5, bytes);
  return g->t[i].mem;
}

static void got_dict_free(got_dict_t *g) {
  for (int i = 0; i < MAX_GOT && i < g->calls; ++i) free(g->t[i].mem);
  memset(g, 0, sizeof *g);
}

/* ---- checks (each writes the first difference into detail) --------------------------------- */

/* The first bytes of what arrived, in hex, to tell whose message it was. */
static const char *head_hex(const void *p, size_t n, char *out, size_t cap) {
  const uint8_t *b = p;
  size_t k = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && i < 8 && k + 4 < cap; ++i) k += (size_t)snprintf(out + k, cap - k, " %02x", b[i]);
  return out;
}

static got_t words_equal(const int32_t *got, const int32_t *want, size_t n, const char *what, char *detail,
                         size_t cap) {
  char head[32];
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      snprintf(detail, cap, "%s[%zu] = %d, expected %d%s (begins%s)", what, i, got[i], want[i],
               got[i] == SENTINEL ? ", never written" : "", head_hex(got, n * sizeof *got, head, sizeof head));
      return GOT_FOREIGN;
    }
  return GOT_EXACT;
}

static got_t bytes_equal(const pstate_bytes_t *b, const uint8_t *want, size_t n, const char *what, char *detail,
                         size_t cap) {
  char head[32];
  if (b->size != n) {
    snprintf(detail, cap, "%s: %zu bytes, expected %zu (begins%s)", what, b->size, n,
             head_hex(b->data, b->size, head, sizeof head));
    return GOT_FOREIGN;
  }
  const uint8_t *got = b->data;
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      snprintf(detail, cap, "%s: byte %zu = 0x%02x, expected 0x%02x (begins%s)", what, i, got[i], want[i],
               head_hex(got, n, head, sizeof head));
      return GOT_FOREIGN;
    }
  return GOT_EXACT;
}

static got_t dict_equal(const got_dict_t *g, const dict_t *want, const char *what, char *detail, size_t cap) {
  if (g->calls != 2) {
    snprintf(detail, cap, "%s: %d tensors, expected 2%s%s", what, g->calls, g->calls > 0 ? "; first: " : "",
             g->calls > 0 ? g->t[0].name : "");
    return GOT_FOREIGN;
  }
  for (int i = 0; i < 2; ++i) {
    const pstate_tensor_t *w = &want->t[i];
    size_t bytes = (size_t)w->shape[w->ndim - 1] * pstate_dtype_size(w->dtype);
    int same_shape = g->t[i].ndim == w->ndim;
    for (int k = 0; same_shape && k < w->ndim; ++k) same_shape = g->t[i].shape[k] == w->shape[k];
    if (strcmp(g->t[i].name, w->name) != 0 || g->t[i].dtype != w->dtype || !same_shape || g->t[i].bytes != bytes) {
      snprintf(detail, cap, "%s: tensor %d is '%s' %s ndim %d, %zu bytes; expected '%s' %s ndim %d, %zu bytes", what, i,
               g->t[i].name, pstate_dtype_name(g->t[i].dtype) ? pstate_dtype_name(g->t[i].dtype) : "?", g->t[i].ndim,
               g->t[i].bytes, w->name, pstate_dtype_name(w->dtype), w->ndim, bytes);
      return GOT_FOREIGN;
    }
    if (g->t[i].mem == NULL) {
      snprintf(detail, cap, "%s: '%s' got no memory", what, w->name);
      return GOT_FOREIGN;
    }
    if (memcmp(g->t[i].mem, w->data, bytes) != 0) {
      const uint8_t *a = g->t[i].mem, *b = w->data;
      size_t k = 0;
      while (a[k] == b[k]) ++k;
      snprintf(detail, cap, "%s: '%s' byte %zu = 0x%02x, expected 0x%02x", what, w->name, k, a[k], b[k]);
      return GOT_FOREIGN;
    }
  }
  return GOT_EXACT;
}

/* ---- a rank ------------------------------------------------------------------------------- */

/* The hub: rank 0 talks to every other rank, the others to rank 0. */
static int hub_peers(int rank, int world, int *peers) {
  if (rank != 0) {
    peers[0] = 0;
    return 1;
  }
  for (int q = 1; q < world; ++q) peers[q - 1] = q;
  return world - 1;
}

typedef struct rank_io_t {
  pstate_t *ps;
  pstate_group_t *g, *ag;
  int rank, world;
  size_t n;
  int32_t *send, *recv, *want;             /* world * n each */
  int32_t *out[MAX_RANKS], *in[MAX_RANKS]; /* p2p, per peer rank, n each */
  uint8_t *obj_out[MAX_RANKS], *obj_want;  /* 4n bytes each; obj_want world * 4n */
  pstate_bytes_t obj_in[MAX_RANKS];
  dict_t dict_out[MAX_RANKS], dict_want;
  got_dict_t dict_in[MAX_RANKS];
  pstate_group_t *made;
  size_t sizes[MAX_RANKS]; /* all_gather_object's sizes */
  pstate_status_t first;
  char msg[240];
} rank_io_t;

/* Keeps the first failure and its message (a later call would overwrite pstate_last_error). */
static void note(rank_io_t *io, pstate_status_t s) {
  if (s == PSTATE_OK || io->first != PSTATE_OK) return;
  io->first = s;
  snprintf(io->msg, sizeof io->msg, "%s", pstate_last_error());
}

static int io_alloc(rank_io_t *io) {
  size_t wn = (size_t)io->world * io->n + 1;
  io->send = malloc(wn * sizeof(int32_t));
  io->recv = malloc(wn * sizeof(int32_t));
  io->want = malloc(wn * sizeof(int32_t));
  io->obj_want = malloc(wn * 4);
  if (!io->send || !io->recv || !io->want || !io->obj_want) return 0;
  for (int q = 0; q < io->world; ++q) {
    io->out[q] = malloc((io->n + 1) * sizeof(int32_t));
    io->in[q] = malloc((io->n + 1) * sizeof(int32_t));
    io->obj_out[q] = malloc(4 * io->n + 1);
    if (!io->out[q] || !io->in[q] || !io->obj_out[q]) return 0;
  }
  fill_sentinel(io->recv, wn);
  return 1;
}

static void io_free(rank_io_t *io) {
  free(io->send);
  free(io->recv);
  free(io->want);
  free(io->obj_want);
  for (int q = 0; q < io->world; ++q) {
    free(io->out[q]);
    free(io->in[q]);
    free(io->obj_out[q]);
    pstate_bytes_free(&io->obj_in[q]);
    dict_free(&io->dict_out[q]);
    got_dict_free(&io->dict_in[q]);
  }
  dict_free(&io->dict_want);
}

static void fill_bytes(uint8_t *p, size_t n, int cls, int src, int dst) {
  for (size_t i = 0; i < n; ++i) p[i] = byte_of(cls, src, dst, i);
}

/* Makes this rank's call of `op`; the status of its first failure, else OK. */
static pstate_status_t run_op(rank_io_t *io, op_t op) {
  const size_t n = io->n, wn = (size_t)io->world * n;
  const int r = io->rank, w = io->world;
  pstate_group_t *g = io->g;
  size_t counts[MAX_RANKS];
  for (int q = 0; q < w; ++q) counts[q] = n;
  int peers[MAX_RANKS];
  int np = hub_peers(r, w, peers);
  switch (op) {
    case OP_ALL_REDUCE:
      fill_words(io->send, n, op, r, -1, 0);
      note(io, pstate_all_reduce(g, io->send, io->recv, n, PSTATE_INT32, PSTATE_SUM, NULL));
      break;
    case OP_ALL_GATHER:
      fill_words(io->send, n, op, r, -1, 0);
      note(io, pstate_all_gather(g, io->send, io->recv, n, PSTATE_INT32, NULL));
      break;
    case OP_ALL_GATHERV:
      fill_words(io->send, n, op, r, -1, 0);
      note(io, pstate_all_gatherv(g, io->send, io->recv, counts, PSTATE_INT32, NULL));
      break;
    case OP_REDUCE_SCATTER:
      fill_words(io->send, wn, op, r, -1, 0);
      note(io, pstate_reduce_scatter(g, io->send, io->recv, n, PSTATE_INT32, PSTATE_SUM, NULL));
      break;
    case OP_REDUCE_SCATTERV:
      fill_words(io->send, wn, op, r, -1, 0);
      note(io, pstate_reduce_scatterv(g, io->send, io->recv, counts, PSTATE_INT32, PSTATE_SUM, NULL));
      break;
    case OP_BROADCAST:
      if (r == 0) fill_words(io->recv, n, op, 0, -1, 0); /* the root broadcasts from recv too */
      note(io, pstate_broadcast(g, io->recv, n, PSTATE_INT32, 0, NULL));
      break;
    case OP_GATHER:
      fill_words(io->send, n, op, r, -1, 0);
      note(io, pstate_gather(g, io->send, io->recv, n, PSTATE_INT32, 0, NULL));
      break;
    case OP_ALL_TO_ALL:
      for (int q = 0; q < w; ++q) fill_words(io->send + (size_t)q * n, n, op, r, q, 0);
      note(io, pstate_all_to_all(g, io->send, io->recv, n, PSTATE_INT32, NULL));
      break;
    case OP_REDUCE:
      fill_words(io->send, n, op, r, -1, 0);
      note(io, pstate_reduce(g, io->send, io->recv, n, PSTATE_INT32, PSTATE_SUM, 0, NULL));
      break;
    case OP_SCATTER:
      for (int q = 0; q < w; ++q) fill_words(io->send + (size_t)q * n, n, op, 0, q, 0);
      note(io, pstate_scatter(g, io->send, io->recv, n, PSTATE_INT32, 0, NULL));
      break;
    case OP_BARRIER:
      note(io, pstate_barrier(g));
      break;
    case OP_BROADCAST_OBJECT:
      fill_bytes(io->obj_out[0], 4 * n, op, 0, -1);
      note(io, pstate_broadcast_object(g, io->obj_out[0], 4 * n, 0, &io->obj_in[0]));
      break;
    case OP_ALL_GATHER_OBJECT:
      fill_bytes(io->obj_out[0], 4 * n, op, r, -1);
      note(io, pstate_all_gather_object(g, io->obj_out[0], 4 * n, &io->obj_in[0], io->sizes, MAX_RANKS, &(size_t){0}));
      break;
    case OP_BROADCAST_TENSOR_DICT:
      if (r == 0 && !dict_make(&io->dict_out[0], op, 0, -1, n)) return PSTATE_ERR_NO_MEMORY;
      note(io, pstate_broadcast_tensor_dict(g, r == 0 ? io->dict_out[0].t : NULL, r == 0 ? 2 : 0, 0,
                                            r == 0 ? NULL : record_alloc, &io->dict_in[0], NULL));
      break;
    case OP_NEW_GROUP: {
      int ranks[MAX_RANKS];
      for (int q = 0; q < w; ++q) ranks[q] = q;
      note(io, pstate_new_group(io->ps, ranks, (size_t)w, &io->made));
      break;
    }
    case OP_INIT_MODEL_PARALLEL: {
      pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
      cfg.tensor_parallel_size = w;
      note(io, pstate_initialize_model_parallel(io->ps, &cfg));
      break;
    }
    case OP_SEND:
      for (int k = 0; k < np && io->first == PSTATE_OK; ++k) {
        fill_words(io->out[peers[k]], n, CLS_P2P, r, peers[k], 0);
        note(io, pstate_send(g, io->out[peers[k]], n, PSTATE_INT32, peers[k], NULL));
      }
      break;
    case OP_RECV:
      for (int k = 0; k < np && io->first == PSTATE_OK; ++k) {
        fill_sentinel(io->in[peers[k]], n);
        note(io, pstate_recv(g, io->in[peers[k]], n, PSTATE_INT32, peers[k], NULL));
      }
      break;
    case OP_ISEND:
    case OP_IRECV: {
      pstate_request_t *req[MAX_RANKS] = {NULL};
      for (int k = 0; k < np; ++k) {
        int p = peers[k];
        if (op == OP_ISEND) {
          fill_words(io->out[p], n, CLS_P2P, r, p, 0);
          note(io, pstate_isend(g, io->out[p], n, PSTATE_INT32, p, NULL, &req[k]));
        } else {
          fill_sentinel(io->in[p], n);
          note(io, pstate_irecv(g, io->in[p], n, PSTATE_INT32, p, NULL, &req[k]));
        }
      }
      for (int k = 0; k < np; ++k)
        if (req[k] != NULL) note(io, pstate_wait(req[k]));
      break;
    }
    case OP_P2P_BATCH: {
      pstate_p2p_op_t ops[2 * MAX_RANKS];
      for (int k = 0; k < np; ++k) {
        int p = peers[k];
        pstate_p2p_op_t s = PSTATE_P2P_OP_INIT, v = PSTATE_P2P_OP_INIT;
        fill_words(io->out[p], n, CLS_P2P, r, p, 0);
        fill_sentinel(io->in[p], n);
        s.is_send = 1;
        s.buf = io->out[p];
        s.count = n;
        s.dtype = PSTATE_INT32;
        s.peer = p;
        v.is_send = 0;
        v.buf = io->in[p];
        v.count = n;
        v.dtype = PSTATE_INT32;
        v.peer = p;
        ops[2 * k] = s;
        ops[2 * k + 1] = v;
      }
      note(io, pstate_p2p_batch(g, ops, 2 * (size_t)np, NULL));
      break;
    }
    case OP_SEND_OBJECT:
      for (int k = 0; k < np && io->first == PSTATE_OK; ++k) {
        fill_bytes(io->obj_out[peers[k]], 4 * n, CLS_OBJECT, r, peers[k]);
        note(io, pstate_send_object(g, io->obj_out[peers[k]], 4 * n, peers[k]));
      }
      break;
    case OP_RECV_OBJECT:
      for (int k = 0; k < np && io->first == PSTATE_OK; ++k)
        note(io, pstate_recv_object(g, peers[k], &io->obj_in[peers[k]]));
      break;
    case OP_SEND_TENSOR_DICT:
    case OP_SEND_DICT_SLICED:
      for (int k = 0; k < np && io->first == PSTATE_OK; ++k) {
        int p = peers[k];
        if (!dict_make(&io->dict_out[p], op == OP_SEND_TENSOR_DICT ? CLS_DICT : CLS_SLICED, r, p, n))
          return PSTATE_ERR_NO_MEMORY;
        if (op == OP_SEND_TENSOR_DICT)
          note(io, pstate_send_tensor_dict(g, io->dict_out[p].t, 2, p, NULL));
        else
          note(io, pstate_send_tensor_dict_sliced(g, io->dict_out[p].t, 2, p, io->ag, NULL));
      }
      break;
    case OP_RECV_TENSOR_DICT:
    case OP_RECV_DICT_SLICED:
      for (int k = 0; k < np && io->first == PSTATE_OK; ++k) {
        int p = peers[k];
        if (op == OP_RECV_TENSOR_DICT)
          note(io, pstate_recv_tensor_dict(g, p, record_alloc, &io->dict_in[p], NULL));
        else
          note(io, pstate_recv_tensor_dict_sliced(g, p, io->ag, record_alloc, &io->dict_in[p], NULL));
      }
      break;
    case N_OPS:
      break;
  }
  return io->first;
}

/* After an OK: compares every output with the reference computed here (as if every partner had
 * made the matching call). */
static got_t check_op(rank_io_t *io, op_t op, char *detail, size_t cap) {
  const size_t n = io->n, wn = (size_t)io->world * n;
  const int r = io->rank, w = io->world;
  int peers[MAX_RANKS];
  int np = hub_peers(r, w, peers);
  got_t got = GOT_EXACT;
  char what[48];
  switch (op) {
    case OP_ALL_REDUCE:
    case OP_REDUCE:
      if (op == OP_REDUCE && r != 0) return GOT_EXACT; /* no output off the root */
      for (size_t i = 0; i < n; ++i) {
        int32_t sum = 0;
        for (int q = 0; q < w; ++q) sum += word(op, q, -1, 0, i);
        io->want[i] = sum;
      }
      return words_equal(io->recv, io->want, n, "recv", detail, cap);
    case OP_REDUCE_SCATTER:
    case OP_REDUCE_SCATTERV:
      for (size_t i = 0; i < n; ++i) {
        int32_t sum = 0;
        for (int q = 0; q < w; ++q) sum += word(op, q, -1, 0, (size_t)r * n + i);
        io->want[i] = sum;
      }
      return words_equal(io->recv, io->want, n, "recv", detail, cap);
    case OP_ALL_GATHER:
    case OP_ALL_GATHERV:
    case OP_GATHER:
      if (op == OP_GATHER && r != 0) return GOT_EXACT; /* no output off the root */
      for (int q = 0; q < w; ++q) fill_words(io->want + (size_t)q * n, n, op, q, -1, 0);
      return words_equal(io->recv, io->want, wn, "recv", detail, cap);
    case OP_BROADCAST:
      fill_words(io->want, n, op, 0, -1, 0);
      return words_equal(io->recv, io->want, n, "buf", detail, cap);
    case OP_ALL_TO_ALL:
      for (int q = 0; q < w; ++q) fill_words(io->want + (size_t)q * n, n, op, q, r, 0);
      return words_equal(io->recv, io->want, wn, "recv", detail, cap);
    case OP_SCATTER:
      fill_words(io->want, n, op, 0, r, 0);
      return words_equal(io->recv, io->want, n, "recv", detail, cap);
    case OP_BARRIER:
      return GOT_SYNC;
    case OP_BROADCAST_OBJECT:
      fill_bytes(io->obj_want, 4 * n, op, 0, -1);
      return bytes_equal(&io->obj_in[0], io->obj_want, 4 * n, "object", detail, cap);
    case OP_ALL_GATHER_OBJECT:
      for (int q = 0; q < w; ++q) fill_bytes(io->obj_want + (size_t)q * 4 * n, 4 * n, op, q, -1);
      for (int q = 0; q < w; ++q)
        if (io->sizes[q] != 4 * n) {
          char head[32];
          snprintf(detail, cap, "sizes[%d] = %zu, expected %zu; %zu bytes in all (begins%s)", q, io->sizes[q], 4 * n,
                   io->obj_in[0].size, head_hex(io->obj_in[0].data, io->obj_in[0].size, head, sizeof head));
          return GOT_FOREIGN;
        }
      return bytes_equal(&io->obj_in[0], io->obj_want, 4 * wn, "objects", detail, cap);
    case OP_BROADCAST_TENSOR_DICT:
      if (r == 0 && io->dict_in[0].calls == 0) return GOT_EXACT; /* src: nothing received */
      if (r == 0) {
        snprintf(detail, cap, "src was asked for %d allocations", io->dict_in[0].calls);
        return GOT_FOREIGN;
      }
      if (!dict_make(&io->dict_want, op, 0, -1, n)) return GOT_FOREIGN;
      return dict_equal(&io->dict_in[0], &io->dict_want, "dict", detail, cap);
    case OP_NEW_GROUP: {
      pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
      if (io->made == NULL || pstate_group_info(io->made, &info) != PSTATE_OK || info.world_size != w ||
          info.rank_in_group != r || info.kind != PSTATE_GROUP_CUSTOM) {
        snprintf(detail, cap, "new_group made %s of %d ranks, rank %d in it", io->made ? "a group" : "no group",
                 info.world_size, info.rank_in_group);
        return GOT_FOREIGN;
      }
      return GOT_SYNC;
    }
    case OP_INIT_MODEL_PARALLEL: {
      pstate_group_t *tp = NULL;
      pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
      if (!pstate_model_parallel_is_initialized(io->ps) ||
          pstate_get_group(io->ps, PSTATE_GROUP_TP, &tp) != PSTATE_OK || pstate_group_info(tp, &info) != PSTATE_OK ||
          info.world_size != w) {
        snprintf(detail, cap, "tp group of %d ranks, expected %d", info.world_size, w);
        return GOT_FOREIGN;
      }
      return GOT_SYNC;
    }
    case OP_SEND:
    case OP_ISEND:
    case OP_SEND_OBJECT:
    case OP_SEND_TENSOR_DICT:
    case OP_SEND_DICT_SLICED:
      return GOT_EXACT; /* no output: peer_output() makes it ok-sent */
    case OP_RECV:
    case OP_IRECV:
    case OP_P2P_BATCH:
      for (int k = 0; k < np && got == GOT_EXACT; ++k) {
        fill_words(io->want, n, CLS_P2P, peers[k], r, 0);
        snprintf(what, sizeof what, "from rank %d: buf", peers[k]);
        got = words_equal(io->in[peers[k]], io->want, n, what, detail, cap);
      }
      return got;
    case OP_RECV_OBJECT:
      for (int k = 0; k < np && got == GOT_EXACT; ++k) {
        fill_bytes(io->obj_want, 4 * n, CLS_OBJECT, peers[k], r);
        snprintf(what, sizeof what, "object from rank %d", peers[k]);
        got = bytes_equal(&io->obj_in[peers[k]], io->obj_want, 4 * n, what, detail, cap);
      }
      return got;
    case OP_RECV_TENSOR_DICT:
    case OP_RECV_DICT_SLICED:
      for (int k = 0; k < np && got == GOT_EXACT; ++k) {
        dict_free(&io->dict_want);
        if (!dict_make(&io->dict_want, op == OP_RECV_TENSOR_DICT ? CLS_DICT : CLS_SLICED, peers[k], r, n))
          return GOT_FOREIGN;
        snprintf(what, sizeof what, "dict from rank %d", peers[k]);
        got = dict_equal(&io->dict_in[peers[k]], &io->dict_want, what, detail, cap);
      }
      return got;
    case N_OPS:
      break;
  }
  return GOT_FOREIGN;
}

/* Milliseconds this thread has spent runnable but waiting for a CPU (the kernel's schedstat run
 * delay); 0 where the kernel does not say. */
static double runqueue_ms(void) {
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  unsigned long long on_cpu = 0, waiting = 0;
  int ok = f != NULL && fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2;
  if (f != NULL) fclose(f);
  return ok ? (double)waiting / 1e6 : 0.0;
}

static int pair_rank(const pstate_test_rank_t *self) {
  const case_t *c = &g_slot->c;
  rank_result_t *res = &g_slot->r[self->rank];
  if (c->ucx) setenv("PSTATE_SHM", "0", 1);
  const op_t op = self->rank < c->n_a ? c->a : c->b;

  rank_io_t io;
  memset(&io, 0, sizeof io);
  io.rank = self->rank;
  io.world = c->world;
  io.n = g_slot->n;
  if (!io_alloc(&io)) return 1;

  pstate_status_t s = pstate_test_init(self, g_slot->timeout_ms, &io.ps);
  if (s == PSTATE_OK) s = pstate_get_group(io.ps, PSTATE_GROUP_WORLD, &io.g);
  if (s == PSTATE_OK) s = pstate_new_group(io.ps, &io.rank, 1, &io.ag); /* sliced dicts' ag: this rank alone */
  if (s == PSTATE_OK) s = pstate_barrier(io.g);                         /* everyone is up; the next call is the case */
  if (s != PSTATE_OK) {
    res->setup_fail = 1;
    res->status = s;
    snprintf(res->msg, sizeof res->msg, "setup: %s", pstate_last_error());
    __atomic_add_fetch(&g_slot->returned, 1, __ATOMIC_SEQ_CST);
    pstate_abort(io.ps);
    io_free(&io);
    return 0;
  }

  double q0 = runqueue_ms(), t0 = pstate_test_now_ms();
  s = run_op(&io, op);
  res->elapsed_ms = pstate_test_now_ms() - t0;
  res->starved_ms = runqueue_ms() - q0;
  res->status = s;
  snprintf(res->msg, sizeof res->msg, "%s", io.msg);
  if (s == PSTATE_OK) {
    got_t got = check_op(&io, op, res->detail, sizeof res->detail);
    res->got = got == GOT_EXACT && !peer_output(op, io.rank) ? GOT_SENT : got;
  }
  res->returned = 1;
  __atomic_add_fetch(&g_slot->returned, 1, __ATOMIC_SEQ_CST);
  /* Hold (as test_mismatch_matrix): a rank whose call returned must not make a peer's answer
   * PEER_LOST by leaving before the peer has its own; wait for every rank, or for the bound. */
  while (g_slot->hold && __atomic_load_n(&g_slot->returned, __ATOMIC_SEQ_CST) < c->world &&
         pstate_test_now_ms() - t0 < (double)g_slot->timeout_ms + SLACK_MS)
    usleep(5000);
  pstate_abort(io.ps);
  io_free(&io);
  return 0;
}

/* ---- judging -------------------------------------------------------------------------------- */

typedef enum verdict_t {
  V_OK_EXACT,
  V_OK_SENT,
  V_OK_SYNC, /* a sync call's OK in a control */
  V_EXPECTED,
  V_OK_FOREIGN,
  V_OK_UNPAIRED,
  V_OTHER_ERROR,
  V_HUNG,
  V_SETUP,
  N_VERDICTS
} verdict_t;

static const char *const kVerdictName[N_VERDICTS] = {"ok-exact",    "ok-sent",     "ok",   "expected", "OK-FOREIGN",
                                                     "OK-UNPAIRED", "OTHER-ERROR", "HUNG", "SETUP"};

typedef struct outcome_t {
  int run;
  int setup_tries, hung_tries;
  rank_result_t r[MAX_RANKS];
  int statuses[MAX_RANKS];
  verdict_t v[MAX_RANKS];
  int foreign, unpaired, other, hung, setup, control_bad, ok_sent, ok_exact;
  int failed;
} outcome_t;

static int expected_error(int s) {
  return s == PSTATE_ERR_MISMATCH || s == PSTATE_ERR_PEER_LOST || s == PSTATE_ERR_TIMEOUT || s == PSTATE_ERR_ABORTED;
}

/* A rank is late when its call took longer than timeout + 2 s, not counting the time it, and at
 * most the longest of its peers (whose answer it may wait for), were runnable without a CPU: on
 * a machine shared with other work a rank can be starved for seconds, which says nothing about
 * pstate. */
static int late(const case_t *c, const outcome_t *o, int r, double bound) {
  double peers = 0.0;
  for (int q = 0; q < c->world; ++q)
    if (q != r && o->r[q].starved_ms > peers) peers = o->r[q].starved_ms;
  return o->r[r].elapsed_ms - o->r[r].starved_ms - peers > bound;
}

static void judge(const case_t *c, int64_t tmo, outcome_t *o) {
  double bound = (double)tmo + SLACK_MS;
  o->foreign = o->unpaired = o->other = o->hung = o->setup = o->control_bad = o->ok_sent = o->ok_exact = 0;
  for (int r = 0; r < c->world; ++r) {
    const rank_result_t *res = &o->r[r];
    const int st = o->statuses[r];
    const int clean_exit = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    verdict_t v;
    if (res->setup_fail)
      v = V_SETUP;
    else if (!res->returned || late(c, o, r, bound) || !clean_exit)
      v = V_HUNG; /* did not return in time, killed at the bound, or crashed (also after its call) */
    else if (res->status == PSTATE_OK) {
      switch (res->got) {
        case GOT_EXACT:
          v = V_OK_EXACT;
          break;
        case GOT_SENT:
          v = V_OK_SENT;
          break;
        case GOT_SYNC:
          v = c->control ? V_OK_SYNC : V_OK_UNPAIRED;
          break;
        default:
          v = V_OK_FOREIGN;
          break;
      }
    } else
      v = expected_error(res->status) ? V_EXPECTED : V_OTHER_ERROR;
    o->v[r] = v;
    o->foreign += v == V_OK_FOREIGN;
    o->unpaired += v == V_OK_UNPAIRED;
    o->other += v == V_OTHER_ERROR;
    o->hung += v == V_HUNG;
    o->setup += v == V_SETUP;
    o->ok_sent += v == V_OK_SENT;
    o->ok_exact += v == V_OK_EXACT;
    if (c->control && v != V_OK_EXACT && v != V_OK_SENT && v != V_OK_SYNC) o->control_bad = 1;
  }
  o->failed = o->foreign || o->unpaired || o->other || o->hung || o->setup || o->control_bad;
}

/* One letter per case for the grids, the worst first. */
static char case_letter(const case_t *c, const outcome_t *o) {
  if (!o->run) return ' ';
  if (o->hung) return 'H';
  if (o->foreign) return 'F';
  if (o->unpaired) return 'U';
  if (o->other) return 'E';
  if (o->setup) return 'S';
  if (o->control_bad) return 'C';
  if (c->control) return '=';
  return o->ok_sent || o->ok_exact ? 'o' : '.';
}

static void print_case(const case_t *c, const outcome_t *o, int with_messages) {
  printf("%s %s [rank%s 0%s: %s; others: %s]%s%s%s%s%s%s\n", o->failed ? "FAIL" : "ok  ", c->name,
         c->n_a > 1 ? "s" : "", c->n_a > 1 ? "-1" : "", kOpName[c->a], kOpName[c->b], c->control ? " control" : "",
         o->foreign ? " OK-FOREIGN" : "", o->unpaired ? " OK-UNPAIRED" : "", o->other ? " OTHER-ERROR" : "",
         o->hung ? " HUNG" : "", c->control && o->control_bad ? " CONTROL-BAD" : "");
  for (int r = 0; r < c->world; ++r) {
    const rank_result_t *res = &o->r[r];
    char starved[48];
    snprintf(starved, sizeof starved, " (%.0f ms of it without a CPU)", res->starved_ms);
    if (res->setup_fail)
      printf("    rank %d: setup failed: %s: %s\n", r, pstate_status_string(res->status), res->msg);
    else if (!res->returned)
      printf("    rank %d: %s: did not return (killed at the bound, or crashed: wait status 0x%x)\n", r,
             kVerdictName[o->v[r]], o->statuses[r]);
    else {
      const int st = o->statuses[r];
      char after[96] = "";
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) /* its call returned, its process did not end well */
        snprintf(after, sizeof after, " [then killed or crashed after its call: wait status 0x%x]", st);
      printf("    rank %d: %s: %s in %.0f ms%s%s%s%s%s%s\n", r, kVerdictName[o->v[r]],
             pstate_status_string(res->status), res->elapsed_ms, res->starved_ms >= 100 ? starved : "", after,
             with_messages && res->msg[0] ? ": " : "", with_messages ? res->msg : "", res->detail[0] ? "; " : "",
             res->detail);
    }
  }
}

/* ---- running ---------------------------------------------------------------------------------- */

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? v : dflt;
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v != NULL && atol(v) > 0 ? atol(v) : dflt;
}

static int env_flag(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

static int selected(const char *name) {
  const char *f = env_or("PSTATE_PAIRWISE_FILTER", NULL);
  if (f == NULL) return 1;
  char *buf = strdup(f);
  int hit = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL && !hit; tok = strtok_r(NULL, ",", &save)) {
    size_t len = strlen(tok);
    size_t nl = strlen(name);
    if (tok[0] == '^')
      hit = strncmp(name, tok + 1, len - 1) == 0;
    else if (len > 0 && tok[len - 1] == '$')
      hit = nl >= len - 1 && strncmp(name + nl - (len - 1), tok, len - 1) == 0;
    else
      hit = strstr(name, tok) != NULL;
  }
  free(buf);
  return hit;
}

/* PSTATE_PAIRWISE_SPLITS: a comma-separated list of split names, default "w2,w3". */
static int split_enabled(split_t split) {
  char *buf = strdup(env_or("PSTATE_PAIRWISE_SPLITS", "w2,w3"));
  int on = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
    on |= strcmp(tok, "all") == 0 || strcmp(tok, kSplitName[split]) == 0;
  free(buf);
  return on;
}

/* PSTATE_PAIRWISE_OPS: a comma-separated list of operation names that both A and B must come
 * from (default: every operation). */
static int op_enabled(op_t op) {
  const char *list = env_or("PSTATE_PAIRWISE_OPS", NULL);
  if (list == NULL) return 1;
  char *buf = strdup(list);
  int on = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
    on |= strcmp(tok, kOpName[op]) == 0;
  free(buf);
  return on;
}

static size_t build_cases(case_t *cases, size_t cap) {
  size_t n = 0;
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < N_SPLITS; ++s)
      for (int a = 0; a < N_OPS && split_enabled((split_t)s); ++a)
        for (int b = 0; b < N_OPS; ++b) {
          if (a == b && (!self_agreeing((op_t)a) || s == SPLIT_W3_A01)) continue;
          if (!op_enabled((op_t)a) || !op_enabled((op_t)b)) continue;
          assert_true(n < cap);
          case_t *c = &cases[n++];
          memset(c, 0, sizeof *c);
          c->a = (op_t)a;
          c->b = (op_t)b;
          c->split = (split_t)s;
          c->world = kSplitWorld[s];
          c->n_a = kSplitRanksA[s];
          c->ucx = p;
          c->control = a == b || (s != SPLIT_W3_A01 && cross_agreeing((op_t)a, (op_t)b));
          snprintf(c->name, sizeof c->name, "%s/%s/%s/%s", kOpName[a], kOpName[b], kPaths[p], kSplitName[s]);
        }
  return n;
}

typedef struct run_t {
  size_t n_run, n_setup_retried, n_hung_retried, n_hung_passed;
  double wall_ms;
} run_t;

/* Runs the selected cases, `jobs` at a time, each in a runner process of its own. */
static run_t run_cases(const case_t *cases, size_t n, outcome_t *out) {
  const int jobs = (int)env_long("PSTATE_PAIRWISE_JOBS", DEFAULT_JOBS);
  const int64_t tmo = env_long("PSTATE_PAIRWISE_TIMEOUT_MS", 500);
  const size_t elems = (size_t)env_long("PSTATE_PAIRWISE_N", 16);
  /* the runner kills a rank at start-up + timeout + slack (the call, then the hold, both bounded
   * from the call's start), rounded up, + a margin for start-up on a loaded machine */
  const int kill_s = (int)((tmo + SLACK_MS + 999) / 1000) + 8;
  const int hold = !env_flag("PSTATE_PAIRWISE_NO_HOLD");
  run_t run = {0, 0, 0, 0, 0.0};

  g_slots = mmap(NULL, sizeof(slot_t) * (size_t)jobs, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(g_slots != MAP_FAILED);
  size_t *queue = calloc(n * (SETUP_RETRIES + 2) + 1, sizeof(size_t));
  pid_t *runner = calloc((size_t)jobs, sizeof(pid_t));
  int *port = calloc((size_t)jobs, sizeof(int)); /* each running job's store port */
  size_t *slot_case = calloc((size_t)jobs, sizeof(size_t));
  assert_true(queue != NULL && runner != NULL && slot_case != NULL && port != NULL);
  size_t q_len = 0, q_next = 0;
  for (size_t i = 0; i < n; ++i)
    if (selected(cases[i].name)) queue[q_len++] = i;

  double start = pstate_test_now_ms();
  const size_t first_pass = q_len;
  const int retry_jobs = jobs / 4 > 1 ? jobs / 4 : 1; /* reruns go at a quarter of the pace: less load */
  int active = 0;
  while (q_next < q_len || active > 0) {
    for (int k = 0; k < jobs && q_next < q_len; ++k) {
      if (runner[k] != 0) continue;
      if (q_next >= first_pass && active >= retry_jobs) break;
      size_t ci = queue[q_next++];
      slot_t *sl = &g_slots[k];
      memset(sl, 0, sizeof *sl);
      sl->c = cases[ci];
      sl->n = elems;
      sl->timeout_ms = tmo;
      sl->hold = hold;
      /* a free port that no running job has (two probes can return the same free port) */
      for (int taken = 1; taken;) {
        port[k] = pstate_test_free_port();
        taken = 0;
        for (int j = 0; j < jobs; ++j) taken |= j != k && runner[j] != 0 && port[j] == port[k];
      }
      fflush(stdout);
      fflush(stderr);
      pid_t pid = fork();
      assert_true(pid >= 0);
      if (pid == 0) {
        /* the runner: a job of its own: its port, a token (ranks.h), a job id */
        char id[64], master_port[16];
        snprintf(id, sizeof id, "pairwise-%d-%zu", (int)getpid(), ci);
        snprintf(master_port, sizeof master_port, "%d", port[k]);
        setenv("PSTATE_JOB_ID", id, 1);
        setenv("PSTATE_TEST_MASTER_PORT", master_port, 1);
        g_slot = sl;
        pstate_test_run_processes(sl->c.world, kill_s, pair_rank, NULL, sl->statuses);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
      }
      runner[k] = pid;
      slot_case[k] = ci;
      active++;
    }
    int wst = 0;
    pid_t done = waitpid(-1, &wst, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < jobs; ++k) {
      if (runner[k] != done) continue;
      runner[k] = 0;
      active--;
      size_t ci = slot_case[k];
      outcome_t *o = &out[ci];
      o->run = 1;
      memcpy(o->r, g_slots[k].r, sizeof o->r);
      memcpy(o->statuses, g_slots[k].statuses, sizeof o->statuses);
      judge(&cases[ci], tmo, o);
      if (o->setup && o->setup_tries++ < SETUP_RETRIES) { /* a port taken meanwhile: again */
        printf("RETRY (set-up failed) ");
        print_case(&cases[ci], o, 1);
        queue[q_len++] = ci;
        run.n_setup_retried++;
        continue;
      }
      /* Late or killed once: run it again at the end, so that a machine that starved a rank of CPU
       * for seconds (other jobs on it) is told apart from a call that does not return. Both tries
       * are printed; the second decides. */
      if (o->hung && o->hung_tries++ == 0) {
        printf("RETRY (late or killed on the first try) ");
        print_case(&cases[ci], o, 1);
        queue[q_len++] = ci;
        run.n_hung_retried++;
        continue;
      }
      run.n_hung_passed += o->hung_tries > 0 && !o->hung;
      run.n_run++;
      if (o->failed || env_flag("PSTATE_PAIRWISE_VERBOSE")) print_case(&cases[ci], o, 1);
    }
  }
  run.wall_ms = pstate_test_now_ms() - start;
  munmap(g_slots, sizeof(slot_t) * (size_t)jobs);
  free(queue);
  free(runner);
  free(slot_case);
  free(port);
  return run;
}

/* ---- reporting ------------------------------------------------------------------------------ */

typedef struct tally_t {
  int cases, passed, foreign, unpaired, other, hung, setup, controls, control_bad, ok_sent, ok_exact;
} tally_t;

static void tally_add(tally_t *t, const case_t *c, const outcome_t *o) {
  if (!o->run) return;
  t->cases++;
  t->passed += !o->failed;
  t->foreign += o->foreign > 0;
  t->unpaired += o->unpaired > 0;
  t->other += o->other > 0;
  t->hung += o->hung > 0;
  t->setup += o->setup > 0;
  t->controls += c->control;
  t->control_bad += c->control && o->control_bad;
  t->ok_sent += o->ok_sent > 0;
  t->ok_exact += !c->control && o->ok_exact > 0;
}

static void print_tally_row(const char *label, const tally_t *t) {
  printf("pairwise: %-12s %6d %6d %10d %11d %11d %6d %6d %5d/%-5d %8d %9d\n", label, t->cases, t->passed, t->foreign,
         t->unpaired, t->other, t->hung, t->setup, t->control_bad, t->controls, t->ok_sent, t->ok_exact);
}

static void print_grid(const case_t *cases, const outcome_t *out, size_t n, int path, int split) {
  char grid[N_OPS][N_OPS];
  memset(grid, ' ', sizeof grid);
  int any = 0;
  for (size_t i = 0; i < n; ++i)
    if (cases[i].ucx == path && cases[i].split == (split_t)split && out[i].run) {
      grid[cases[i].a][cases[i].b] = case_letter(&cases[i], &out[i]);
      any = 1;
    }
  if (!any) return;
  printf("\n%s/%s: row A (rank%s), column B (the other rank%s)\n", kPaths[path], kSplitName[split],
         kSplitRanksA[split] > 1 ? "s 0-1" : " 0", kSplitWorld[split] - kSplitRanksA[split] > 1 ? "s" : "");
  printf("%27s", "");
  for (int b = 0; b < N_OPS; ++b) printf("%c", b % 10 == 0 ? '0' + (b / 10) : ' ');
  printf("\n%27s", "");
  for (int b = 0; b < N_OPS; ++b) printf("%d", b % 10);
  printf("\n");
  for (int a = 0; a < N_OPS; ++a) printf("%2d %-24s%.*s\n", a, kOpName[a], N_OPS, grid[a]);
}

#define MAX_CASES 4800

static void test_no_rank_gets_ok_with_data_of_another_call(void **state) {
  (void)state;
  static case_t cases[MAX_CASES];
  size_t n = build_cases(cases, MAX_CASES);
  if (env_flag("PSTATE_PAIRWISE_LIST")) {
    for (size_t i = 0; i < n; ++i)
      if (selected(cases[i].name)) printf("%s%s\n", cases[i].name, cases[i].control ? " (control)" : "");
    return;
  }
  outcome_t *out = calloc(n, sizeof(outcome_t));
  assert_non_null(out);
  run_t run = run_cases(cases, n, out);

  tally_t all;
  memset(&all, 0, sizeof all);
  printf("\npairwise: %-12s %6s %6s %10s %11s %11s %6s %6s %11s %8s %9s\n", "path/world", "cases", "pass", "OK-FOREIGN",
         "OK-UNPAIRED", "OTHER-ERROR", "HUNG", "SETUP", "CONTROL-BAD", "ok-sent", "ok-exact");
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < N_SPLITS; ++s) {
      tally_t t;
      memset(&t, 0, sizeof t);
      for (size_t i = 0; i < n; ++i)
        if (cases[i].ucx == p && cases[i].split == (split_t)s) {
          tally_add(&t, &cases[i], &out[i]);
          tally_add(&all, &cases[i], &out[i]);
        }
      char label[32];
      snprintf(label, sizeof label, "%s/%s", kPaths[p], kSplitName[s]);
      if (t.cases > 0) print_tally_row(label, &t);
    }
  print_tally_row("all", &all);
  printf(
      "pairwise: columns count cases (a case counts once per column); ok-sent: a sending call returned OK "
      "(allowed); ok-exact: a disagreeing case where some rank got exactly its own data (allowed)\n");
  if (strcmp(env_or("PSTATE_PAIRWISE_GRID", "1"), "0") != 0) {
    printf(
        "\ngrids: H hung/late/crashed, F OK with foreign data, U OK-unpaired, E other error, S set-up failed, "
        "C control not all OK, = control passed, . every rank an expected error, o passed with an allowed OK\n");
    for (int p = 0; p < 2; ++p)
      for (int s = 0; s < N_SPLITS; ++s) print_grid(cases, out, n, p, s);
  }
  printf("\npairwise: %zu cases (%d controls) in %.1f s, %ld at a time, timeout %ld ms, N %ld, splits %s%s\n",
         run.n_run, all.controls, run.wall_ms / 1e3, env_long("PSTATE_PAIRWISE_JOBS", DEFAULT_JOBS),
         env_long("PSTATE_PAIRWISE_TIMEOUT_MS", 500), env_long("PSTATE_PAIRWISE_N", 16),
         env_or("PSTATE_PAIRWISE_SPLITS", "w2,w3"), env_flag("PSTATE_PAIRWISE_NO_HOLD") ? " (no hold)" : "");
  printf("pairwise: %zu set-up retries; %zu cases late or killed on the first try, %zu of them in time on the rerun\n",
         run.n_setup_retried, run.n_hung_retried, run.n_hung_passed);
  fflush(stdout);
  free(out);
  assert_int_equal(all.foreign, 0);
  assert_int_equal(all.unpaired, 0);
  assert_int_equal(all.hung, 0);
  assert_int_equal(all.control_bad, 0);
  assert_int_equal(all.other, 0);
  assert_int_equal(all.setup, 0);
}

/* Flight-recorder dumps (pstate writes one from every call that fails with TIMEOUT, MISMATCH,
 * PEER_LOST or ABORTED, before the call returns) go to a folder of this run in memory: written
 * into the build tree on a disk busy with other work, a dozen jobs' dumps at once delayed their
 * calls' return by 2-3 s, past the bound, though pstate had answered in time. */
static char g_trace_dir[64];

static void trace_dir_make(void) {
  if (getenv("PSTATE_TRACE_DIR") != NULL) return;
  snprintf(g_trace_dir, sizeof g_trace_dir, "/dev/shm/pstate-pairwise-XXXXXX");
  if (mkdtemp(g_trace_dir) == NULL) {
    snprintf(g_trace_dir, sizeof g_trace_dir, "/tmp/pstate-pairwise-XXXXXX");
    if (mkdtemp(g_trace_dir) == NULL) {
      g_trace_dir[0] = '\0';
      return;
    }
  }
  setenv("PSTATE_TRACE_DIR", g_trace_dir, 1);
}

static void trace_dir_remove(void) {
  if (g_trace_dir[0] == '\0') return;
  DIR *d = opendir(g_trace_dir);
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_trace_dir, e->d_name);
    unlink(path);
  }
  if (d != NULL) closedir(d);
  rmdir(g_trace_dir);
}

int main(void) {
  unsetenv("PSTATE_CHECK"); /* the agreement under test is the always-on one */
  unsetenv("PSTATE_SHM");   /* each case picks its path */
  /* The short timeout is the calls' deadline; the rendezvous gets its own, so that start-up on a
   * loaded machine (8 jobs at once) is no set-up failure. */
  setenv("PSTATE_INIT_TIMEOUT_MS", "30000", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_rank_gets_ok_with_data_of_another_call),
  };
  trace_dir_make();
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  trace_dir_remove();
  return failed;
}
