/*
 * test_hooks.c — pstate_add_hook sees every call, in order, with its status (issue 45, hooks):
 * two ranks register a recording hook and make a known list of calls (all_reduce, all_gather,
 * broadcast, barrier, send/recv, broadcast_object, a call a second hook refuses on rank 1 only,
 * an all_reduce after it, a MISMATCH); each rank's record must be BEFORE then AFTER of each call,
 * with the same call id, the operation, the statuses the calls returned, the group, the
 * collectives' sequence numbers increasing, the peer and root, the bytes, the send buffer, and a
 * duration. A hook's refusal reaches the peer (INVALID_ARGUMENT naming rank 1) and the group goes
 * on. ABORT is seen once: from the MISMATCH that fails a shared-memory context, from pstate_revoke
 * over UCX (whose exchange leaves the context usable). A hook that calls pstate gets BUSY; a removed
 * hook sees nothing; the argument errors of add/remove.
 *
 * The NaN check (PSTATE_NAN_CHECK=1): rank 1's all_reduce data holds a NaN at index 5: both ranks
 * return INVALID_ARGUMENT before any data moved (rank 0's recv keeps its sentinel), rank 1's text
 * names the group, the call and send[5], rank 0's names rank 1; a clean all_reduce follows and
 * sums; an Inf in a float64 broadcast from the root is caught the same way; an isend's NaN is
 * refused at its post (no request made).
 *
 * Requests and batches: isend/irecv are one call each from the post (BEFORE) to the wait or test
 * that completes them (AFTER, same call id), with the calls made meanwhile hooked in between;
 * p2p_batch is one call (count and dtype of its ops); a hook refuses an isend and a batch locally;
 * a request pending at pstate_finalize gets its AFTER with ABORTED.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"

enum { N = 8, MAX_EVENTS = 64 };

typedef struct event_t {
  pstate_hook_phase_t phase;
  pstate_status_t status;
  uint64_t call_id, seq, count, bytes;
  int dtype, root, peer;
  int64_t duration_ns;
  const void *send;
  char operation[48], group[32];
} event_t;

typedef struct recorder_t {
  event_t ev[MAX_EVENTS];
  int n;
  pstate_t *ps;        /* for the BUSY probe */
  int probe_busy;      /* 1: the next BEFORE calls pstate_barrier and keeps what it returned */
  pstate_status_t busy;
  int aborts;          /* ABORT calls (kept apart from the calls' events) */
  char abort_op[48];
  pstate_status_t abort_status;
} recorder_t;

static pstate_status_t record(void *user, const pstate_call_info_t *info) {
  recorder_t *r = user;
  if (info->struct_size < sizeof(pstate_call_info_t)) return PSTATE_OK; /* an older library: not here */
  if (info->phase == PSTATE_HOOK_ABORT) {
    ++r->aborts;
    snprintf(r->abort_op, sizeof r->abort_op, "%s", info->operation);
    if (info->group == NULL || info->group[0] != '\0' || strcmp(info->path, "none") != 0 || info->message == NULL)
      r->abort_op[0] = '?'; /* ABORT has no group, path "none", and the failure's text */
    r->abort_status = info->status;
    return PSTATE_OK;
  }
  if (r->n == MAX_EVENTS) return PSTATE_OK;
  event_t *e = &r->ev[r->n++];
  e->phase = info->phase;
  e->status = info->status;
  e->call_id = info->call_id;
  e->seq = info->seq;
  e->count = info->count;
  e->bytes = info->bytes;
  e->dtype = info->dtype;
  e->root = info->root;
  e->peer = info->peer;
  e->duration_ns = info->duration_ns;
  e->send = info->send;
  snprintf(e->operation, sizeof e->operation, "%s", info->operation);
  snprintf(e->group, sizeof e->group, "%s", info->group);
  if (r->probe_busy && info->phase == PSTATE_HOOK_BEFORE) {
    pstate_group_t *w = NULL;
    pstate_get_group(r->ps, PSTATE_GROUP_WORLD, &w);
    r->busy = w != NULL ? pstate_barrier(w) : pstate_get_group(r->ps, PSTATE_GROUP_WORLD, &w);
    r->probe_busy = 0;
  }
  return PSTATE_OK;
}

/* The second hook: refuses rank 1's all_reduce of 3 elements. */
static pstate_status_t refuse_three(void *user, const pstate_call_info_t *info) {
  const int *rank = user;
  if (info->phase == PSTATE_HOOK_BEFORE && *rank == 1 && strcmp(info->operation, "all_reduce") == 0 &&
      info->count == 3)
    return PSTATE_ERR_INVALID_ARGUMENT;
  return PSTATE_OK;
}

typedef struct want_t {
  const char *op;
  pstate_status_t status;
} want_t;

static int check_record(const pstate_test_rank_t *self, const recorder_t *r, const want_t *want, int n_want) {
  RANK_CHECK(self, r->n == 2 * n_want, "%d events recorded, %d calls made (each BEFORE and AFTER)\n", r->n, n_want);
  uint64_t last_seq = 0, last_id = 0;
  int collectives = 0;
  for (int i = 0; i < n_want; ++i) {
    const event_t *b = &r->ev[2 * i], *a = &r->ev[2 * i + 1];
    RANK_CHECK(self, b->phase == PSTATE_HOOK_BEFORE && a->phase == PSTATE_HOOK_AFTER,
               "call %d (%s): phases %d, %d\n", i, want[i].op, b->phase, a->phase);
    RANK_CHECK(self, strcmp(b->operation, want[i].op) == 0 && strcmp(a->operation, want[i].op) == 0,
               "call %d: the hook saw %s/%s, the call was %s\n", i, b->operation, a->operation, want[i].op);
    RANK_CHECK(self, b->call_id == a->call_id && b->call_id > last_id, "call %d: ids %llu/%llu after %llu\n", i,
               (unsigned long long)b->call_id, (unsigned long long)a->call_id, (unsigned long long)last_id);
    last_id = b->call_id;
    RANK_CHECK(self, b->status == PSTATE_OK && a->status == want[i].status, "call %d (%s): AFTER says %s, it returned %s\n",
               i, want[i].op, pstate_status_string(a->status), pstate_status_string(want[i].status));
    RANK_CHECK(self, strcmp(b->group, "world:0") == 0, "call %d: group %s\n", i, b->group);
    RANK_CHECK(self, a->duration_ns >= 0 && b->duration_ns == 0, "call %d: durations %lld/%lld\n", i,
               (long long)b->duration_ns, (long long)a->duration_ns);
    const int p2p = strcmp(want[i].op, "send") == 0 || strcmp(want[i].op, "recv") == 0;
    if (p2p) {
      RANK_CHECK(self, b->seq == UINT64_MAX && b->peer == 1 - self->rank && b->root == -1,
                 "call %d (%s): seq %llu peer %d root %d\n", i, want[i].op, (unsigned long long)b->seq, b->peer,
                 b->root);
    } else {
      RANK_CHECK(self, b->seq != UINT64_MAX && (collectives == 0 || b->seq > last_seq) && b->peer == -1,
                 "call %d (%s): seq %llu after %llu, peer %d\n", i, want[i].op, (unsigned long long)b->seq,
                 (unsigned long long)last_seq, b->peer);
      last_seq = b->seq;
      ++collectives;
    }
  }
  return 0;
}

static int rank_main(const pstate_test_rank_t *self) {
  const int ucx = self->arg != NULL;
  pstate_t *ps = NULL;
  RANK_CHECK(self, pstate_test_init(self, 30000, &ps) == PSTATE_OK, "init: %s\n", pstate_last_error());
  pstate_group_t *w = NULL;
  RANK_CHECK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w) == PSTATE_OK, "%s\n", pstate_last_error());

  /* argument errors */
  uint64_t id = 99;
  RANK_CHECK(self, pstate_add_hook(ps, NULL, NULL, &id) == PSTATE_ERR_INVALID_ARGUMENT && id == 0,
             "a NULL hook accepted\n");
  RANK_CHECK(self, pstate_add_hook(ps, record, NULL, NULL) == PSTATE_ERR_INVALID_ARGUMENT, "id NULL accepted\n");
  RANK_CHECK(self, pstate_remove_hook(ps, 12345) == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "12345"),
             "removing no hook: %s\n", pstate_last_error());

  static recorder_t rec;
  memset(&rec, 0, sizeof rec);
  rec.ps = ps;
  uint64_t rec_id = 0, refuse_id = 0;
  int rank = self->rank;
  RANK_CHECK(self, pstate_add_hook(ps, record, &rec, &rec_id) == PSTATE_OK && rec_id != 0, "%s\n",
             pstate_last_error());
  RANK_CHECK(self, pstate_add_hook(ps, refuse_three, &rank, &refuse_id) == PSTATE_OK && refuse_id != rec_id, "%s\n",
             pstate_last_error());

  float in[N], out[2 * N];
  for (int i = 0; i < N; ++i) in[i] = (float)(self->rank + i);
  want_t want[16];
  int n = 0;
  rec.probe_busy = 1; /* the first call's BEFORE calls pstate_barrier */
  RANK_CHECK(self, pstate_all_reduce(w, in, out, N, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_OK, "%s\n",
             pstate_last_error());
  want[n++] = (want_t){"all_reduce", PSTATE_OK};
  RANK_CHECK(self, rec.busy == PSTATE_ERR_BUSY, "a hook's call on its context returned %s, not BUSY\n",
             pstate_status_string(rec.busy));
  RANK_CHECK(self, rec.ev[0].send == in && rec.ev[0].bytes == N * 4 && rec.ev[0].count == N &&
                       rec.ev[0].dtype == PSTATE_FLOAT32,
             "all_reduce BEFORE: send %p (in %p), bytes %llu count %llu dtype %d\n", rec.ev[0].send, (void *)in,
             (unsigned long long)rec.ev[0].bytes, (unsigned long long)rec.ev[0].count, rec.ev[0].dtype);
  RANK_CHECK(self, pstate_all_gather(w, in, out, N, PSTATE_FLOAT32, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
  want[n++] = (want_t){"all_gather", PSTATE_OK};
  RANK_CHECK(self, pstate_broadcast(w, out, N, PSTATE_FLOAT32, 0, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
  want[n++] = (want_t){"broadcast", PSTATE_OK};
  RANK_CHECK(self, rec.ev[2 * (n - 1)].root == 0 && (rec.ev[2 * (n - 1)].send != NULL) == (self->rank == 0),
             "broadcast BEFORE: root %d send %p\n", rec.ev[2 * (n - 1)].root, rec.ev[2 * (n - 1)].send);
  RANK_CHECK(self, pstate_barrier(w) == PSTATE_OK, "%s\n", pstate_last_error());
  want[n++] = (want_t){"barrier", PSTATE_OK};
  if (self->rank == 0) {
    RANK_CHECK(self, pstate_send(w, in, N, PSTATE_FLOAT32, 1, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
    want[n++] = (want_t){"send", PSTATE_OK};
  } else {
    RANK_CHECK(self, pstate_recv(w, out, N, PSTATE_FLOAT32, 0, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
    want[n++] = (want_t){"recv", PSTATE_OK};
  }
  pstate_bytes_t obj = {NULL, 0};
  RANK_CHECK(self, pstate_broadcast_object(w, "hook", 4, 0, &obj) == PSTATE_OK && obj.size == 4, "%s\n",
             pstate_last_error());
  pstate_bytes_free(&obj);
  want[n++] = (want_t){"broadcast_object", PSTATE_OK};

  /* refused by rank 1's hook: every rank INVALID_ARGUMENT, nothing written, the group goes on */
  for (int i = 0; i < 2 * N; ++i) out[i] = -7.0f;
  const pstate_status_t refused = pstate_all_reduce(w, in, out, 3, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, refused == PSTATE_ERR_INVALID_ARGUMENT && out[0] == -7.0f,
             "the refused all_reduce returned %s, out[0] %g: %s\n", pstate_status_string(refused), out[0],
             pstate_last_error());
  RANK_CHECK(self,
             self->rank == 1 ? strstr(pstate_last_error(), "refused by hook") != NULL
                             : strstr(pstate_last_error(), "rank 1") != NULL,
             "the refusal's text: %s\n", pstate_last_error());
  want[n++] = (want_t){"all_reduce", PSTATE_ERR_INVALID_ARGUMENT};
  RANK_CHECK(self, pstate_all_reduce(w, in, out, N, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_OK, "%s\n",
             pstate_last_error());
  for (int i = 0; i < N; ++i)
    RANK_CHECK(self, out[i] == (float)(0 + i) + (float)(1 + i), "after the refusal: out[%d] = %g\n", i, out[i]);
  want[n++] = (want_t){"all_reduce", PSTATE_OK};

  /* one MISMATCH: rank 1 reduces one element more */
  const pstate_status_t s = pstate_all_reduce(w, in, out, (size_t)(N - 1 + self->rank), PSTATE_FLOAT32, PSTATE_SUM,
                                              NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH, "the mismatched all_reduce returned %s\n", pstate_status_string(s));
  want[n++] = (want_t){"all_reduce", PSTATE_ERR_MISMATCH};
  if (check_record(self, &rec, want, n)) return 1;

  if (!ucx) { /* shared memory's MISMATCH failed the context: ABORT once, and not again at abort */
    RANK_CHECK(self, rec.aborts == 1 && strcmp(rec.abort_op, "context_failed") == 0 &&
                         rec.abort_status == PSTATE_ERR_MISMATCH,
               "%d ABORT calls after the context failed (the last: %s, %s)\n", rec.aborts, rec.abort_op,
               pstate_status_string(rec.abort_status));
    pstate_abort(ps);
    RANK_CHECK(self, rec.aborts == 1, "%d ABORT calls after pstate_abort too\n", rec.aborts);
    return 0;
  }
  /* UCX: the context goes on; a removed hook sees nothing more */
  RANK_CHECK(self, rec.aborts == 0, "ABORT without a failure\n");
  RANK_CHECK(self, pstate_remove_hook(ps, rec_id) == PSTATE_OK, "%s\n", pstate_last_error());
  const int seen = rec.n;
  RANK_CHECK(self, pstate_barrier(w) == PSTATE_OK && rec.n == seen, "a removed hook saw %d events\n", rec.n - seen);
  RANK_CHECK(self, pstate_remove_hook(ps, rec_id) == PSTATE_ERR_INVALID_ARGUMENT, "removed twice\n");
  RANK_CHECK(self, pstate_add_hook(ps, record, &rec, &rec_id) == PSTATE_OK, "%s\n", pstate_last_error());
  RANK_CHECK(self, pstate_revoke(ps) == PSTATE_OK, "%s\n", pstate_last_error());
  RANK_CHECK(self, rec.aborts == 1 && strcmp(rec.abort_op, "pstate_revoke") == 0 &&
                       rec.abort_status == PSTATE_ERR_ABORTED,
             "revoke: %d ABORT calls, the last %s\n", rec.aborts, rec.abort_op);
  pstate_abort(ps);
  RANK_CHECK(self, rec.aborts == 1, "%d ABORT calls after revoke and abort\n", rec.aborts);
  return 0;
}

static int nan_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_CHECK(self, pstate_test_init(self, 30000, &ps) == PSTATE_OK, "init: %s\n", pstate_last_error());
  pstate_group_t *w = NULL;
  RANK_CHECK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w) == PSTATE_OK, "%s\n", pstate_last_error());
  float in[N], out[N];
  for (int i = 0; i < N; ++i) in[i] = (float)i, out[i] = -7.0f;
  if (self->rank == 1) in[5] = NAN;
  pstate_status_t s = pstate_all_reduce(w, in, out, N, PSTATE_FLOAT32, PSTATE_SUM, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && out[0] == -7.0f, "the NaN all_reduce returned %s: %s\n",
             pstate_status_string(s), pstate_last_error());
  if (self->rank == 1)
    RANK_CHECK(self,
               strstr(pstate_last_error(), "PSTATE_NAN_CHECK") && strstr(pstate_last_error(), "send[5] is NaN") &&
                   strstr(pstate_last_error(), "all_reduce") && strstr(pstate_last_error(), "world:0"),
               "rank 1's text: %s\n", pstate_last_error());
  else
    RANK_CHECK(self, strstr(pstate_last_error(), "rank 1") != NULL, "rank 0's text: %s\n", pstate_last_error());
  in[5] = 5.0f;
  RANK_CHECK(self, pstate_all_reduce(w, in, out, N, PSTATE_FLOAT32, PSTATE_SUM, NULL) == PSTATE_OK && out[5] == 10.0f,
             "the clean all_reduce: %s\n", pstate_last_error());
  /* an Inf in the root's float64 broadcast; the receiver's buffer is not checked (its NaNs are no data sent) */
  double d[4] = {1, 2, 3, 4};
  if (self->rank == 0) d[2] = INFINITY;
  if (self->rank == 1) d[0] = NAN;
  s = pstate_broadcast(w, d, 4, PSTATE_FLOAT64, 0, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "the Inf broadcast returned %s\n", pstate_status_string(s));
  if (self->rank == 0)
    RANK_CHECK(self, strstr(pstate_last_error(), "send[2] is Inf") != NULL, "rank 0's text: %s\n", pstate_last_error());
  d[2] = 3;
  d[0] = 1;
  RANK_CHECK(self, pstate_broadcast(w, d, 4, PSTATE_FLOAT64, 0, NULL) == PSTATE_OK, "%s\n", pstate_last_error());
  /* an isend's data is checked at its post: refused there, no request made (rank 1 alone posts) */
  if (self->rank == 1) {
    in[2] = NAN;
    pstate_request_t *req = NULL;
    s = pstate_isend(w, in, N, PSTATE_FLOAT32, 0, NULL, &req);
    RANK_CHECK(self,
               s == PSTATE_ERR_INVALID_ARGUMENT && req == NULL && strstr(pstate_last_error(), "send[2] is NaN") &&
                   strstr(pstate_last_error(), "isend"),
               "the NaN isend returned %s: %s\n", pstate_status_string(s), pstate_last_error());
    in[2] = 2.0f;
  }
  /* integers are not looked at */
  int32_t ints[2] = {-1, 0x7F800001};
  RANK_CHECK(self, pstate_all_reduce(w, ints, ints, 2, PSTATE_INT32, PSTATE_MAX, NULL) == PSTATE_OK, "%s\n",
             pstate_last_error());
  RANK_CHECK(self, pstate_finalize(ps) == PSTATE_OK, "finalize: %s\n", pstate_last_error());
  return 0;
}

/* The third hook: refuses (on both ranks, so no message is left unmatched) an isend of 3
 * elements and a p2p_batch of 3 elements. */
static pstate_status_t refuse_three_p2p(void *user, const pstate_call_info_t *info) {
  (void)user;
  if (info->phase == PSTATE_HOOK_BEFORE && info->count == 3 &&
      (strcmp(info->operation, "isend") == 0 || strcmp(info->operation, "p2p_batch") == 0))
    return PSTATE_ERR_INVALID_ARGUMENT;
  return PSTATE_OK;
}

/* Requests and batches: BEFORE at the post, AFTER where the request completes (the calls made
 * while it is pending are hooked in between), the same call id; p2p_batch is one call; a refused
 * isend makes no request; a request still pending at pstate_finalize gets its AFTER with
 * ABORTED. */
static int requests_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_CHECK(self, pstate_test_init(self, 30000, &ps) == PSTATE_OK, "init: %s\n", pstate_last_error());
  pstate_group_t *w = NULL;
  RANK_CHECK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &w) == PSTATE_OK, "%s\n", pstate_last_error());
  static recorder_t rec;
  memset(&rec, 0, sizeof rec);
  uint64_t id = 0;
  RANK_CHECK(self, pstate_add_hook(ps, record, &rec, &id) == PSTATE_OK, "%s\n", pstate_last_error());
  RANK_CHECK(self, pstate_add_hook(ps, refuse_three_p2p, NULL, &id) == PSTATE_OK, "%s\n", pstate_last_error());
  const int peer = 1 - self->rank;
  float in[N], out[N], in2[N], out2[N];
  for (int i = 0; i < N; ++i) in[i] = (float)(10 * self->rank + i), in2[i] = (float)(100 + 10 * self->rank + i);
  pstate_request_t *rr = NULL, *sr = NULL;
  RANK_CHECK(self, pstate_irecv(w, out, N, PSTATE_FLOAT32, peer, NULL, &rr) == PSTATE_OK, "%s\n", pstate_last_error());
  RANK_CHECK(self, pstate_isend(w, in, N, PSTATE_FLOAT32, peer, NULL, &sr) == PSTATE_OK, "%s\n", pstate_last_error());
  RANK_CHECK(self, pstate_barrier(w) == PSTATE_OK, "%s\n", pstate_last_error());
  RANK_CHECK(self, pstate_wait(sr) == PSTATE_OK, "%s\n", pstate_last_error());
  int done = 0;
  for (int i = 0; i < 100000 && !done; ++i)
    RANK_CHECK(self, pstate_test(rr, &done) == PSTATE_OK, "test: %s\n", pstate_last_error());
  RANK_CHECK(self, done && out[3] == (float)(10 * peer + 3), "irecv: done %d out[3] %g\n", done, out[3]);
  pstate_p2p_op_t ops[2] = {PSTATE_P2P_OP_INIT, PSTATE_P2P_OP_INIT};
  ops[0].is_send = 1, ops[0].buf = in2, ops[0].count = N, ops[0].dtype = PSTATE_FLOAT32, ops[0].peer = peer;
  ops[1].is_send = 0, ops[1].buf = out2, ops[1].count = N, ops[1].dtype = PSTATE_FLOAT32, ops[1].peer = peer;
  RANK_CHECK(self, pstate_p2p_batch(w, ops, 2, NULL) == PSTATE_OK && out2[2] == (float)(100 + 10 * peer + 2), "%s\n",
             pstate_last_error());
  pstate_request_t *refused = (pstate_request_t *)&rec;
  RANK_CHECK(self,
             pstate_isend(w, in, 3, PSTATE_FLOAT32, peer, NULL, &refused) == PSTATE_ERR_INVALID_ARGUMENT &&
                 refused == NULL && strstr(pstate_last_error(), "isend refused by hook"),
             "the refused isend: req %p, %s\n", (void *)refused, pstate_last_error());
  ops[0].count = 3;
  RANK_CHECK(self,
             pstate_p2p_batch(w, ops, 1, NULL) == PSTATE_ERR_INVALID_ARGUMENT &&
                 strstr(pstate_last_error(), "p2p_batch refused by hook"),
             "the refused batch: %s\n", pstate_last_error());

  /* the record: B irecv, B isend, B/A barrier, A isend, A irecv, B/A p2p_batch, B/A isend refused, B/A batch refused */
  static const struct {
    pstate_hook_phase_t phase;
    const char *op;
    int call; /* which BEFORE's id an AFTER carries (index into this list) */
    pstate_status_t status;
  } want[] = {
      {PSTATE_HOOK_BEFORE, "irecv", 0, PSTATE_OK},
      {PSTATE_HOOK_BEFORE, "isend", 1, PSTATE_OK},
      {PSTATE_HOOK_BEFORE, "barrier", 2, PSTATE_OK},
      {PSTATE_HOOK_AFTER, "barrier", 2, PSTATE_OK},
      {PSTATE_HOOK_AFTER, "isend", 1, PSTATE_OK},
      {PSTATE_HOOK_AFTER, "irecv", 0, PSTATE_OK},
      {PSTATE_HOOK_BEFORE, "p2p_batch", 6, PSTATE_OK},
      {PSTATE_HOOK_AFTER, "p2p_batch", 6, PSTATE_OK},
      {PSTATE_HOOK_BEFORE, "isend", 8, PSTATE_OK},
      {PSTATE_HOOK_AFTER, "isend", 8, PSTATE_ERR_INVALID_ARGUMENT},
      {PSTATE_HOOK_BEFORE, "p2p_batch", 10, PSTATE_OK},
      {PSTATE_HOOK_AFTER, "p2p_batch", 10, PSTATE_ERR_INVALID_ARGUMENT},
  };
  const int n_want = (int)(sizeof want / sizeof want[0]);
  RANK_CHECK(self, rec.n == n_want, "%d events, want %d\n", rec.n, n_want);
  for (int i = 0; i < n_want; ++i) {
    const event_t *e = &rec.ev[i];
    RANK_CHECK(self, e->phase == want[i].phase && strcmp(e->operation, want[i].op) == 0 && e->status == want[i].status,
               "event %d: phase %d %s %s, want phase %d %s %s\n", i, e->phase, e->operation,
               pstate_status_string(e->status), want[i].phase, want[i].op, pstate_status_string(want[i].status));
    RANK_CHECK(self, e->call_id == rec.ev[want[i].call].call_id, "event %d (%s): call id %llu, its BEFORE's %llu\n", i,
               e->operation, (unsigned long long)e->call_id, (unsigned long long)rec.ev[want[i].call].call_id);
    if (i > 0 && want[i].phase == PSTATE_HOOK_BEFORE)
      RANK_CHECK(self, e->call_id > rec.ev[i - 1].call_id, "event %d: ids not increasing\n", i);
  }
  RANK_CHECK(self,
             rec.ev[1].send == in && rec.ev[1].bytes == N * 4 && rec.ev[1].peer == peer && rec.ev[0].send == NULL &&
                 rec.ev[0].peer == peer && rec.ev[0].seq == UINT64_MAX,
             "isend/irecv BEFORE: send %p/%p bytes %llu peers %d/%d\n", rec.ev[1].send, rec.ev[0].send,
             (unsigned long long)rec.ev[1].bytes, rec.ev[1].peer, rec.ev[0].peer);
  RANK_CHECK(self,
             rec.ev[6].count == 2 * N && rec.ev[6].dtype == PSTATE_FLOAT32 && rec.ev[6].bytes == 2 * N * 4 &&
                 rec.ev[6].peer == -1,
             "p2p_batch BEFORE: count %llu dtype %d bytes %llu peer %d\n", (unsigned long long)rec.ev[6].count,
             rec.ev[6].dtype, (unsigned long long)rec.ev[6].bytes, rec.ev[6].peer);
  RANK_CHECK(self, rec.ev[5].duration_ns >= rec.ev[3].duration_ns,
             "the irecv's AFTER (%lld ns from its post) is shorter than the barrier inside it (%lld ns)\n",
             (long long)rec.ev[5].duration_ns, (long long)rec.ev[3].duration_ns);

  /* a request pending at pstate_finalize: AFTER with ABORTED there (rank 0 waits for a message rank 1 never sends) */
  if (self->rank == 0) {
    RANK_CHECK(self, pstate_irecv(w, out, N, PSTATE_FLOAT32, peer, NULL, &rr) == PSTATE_OK, "%s\n",
               pstate_last_error());
  }
  RANK_CHECK(self, pstate_finalize(ps) == PSTATE_OK, "finalize: %s\n", pstate_last_error());
  if (self->rank == 0) {
    const event_t *b = &rec.ev[n_want], *a = &rec.ev[n_want + 1];
    RANK_CHECK(self,
               rec.n == n_want + 2 && b->phase == PSTATE_HOOK_BEFORE && a->phase == PSTATE_HOOK_AFTER &&
                   strcmp(a->operation, "irecv") == 0 && a->call_id == b->call_id && a->status == PSTATE_ERR_ABORTED,
               "the request pending at finalize: %d events, the last %s %s\n", rec.n, rec.ev[rec.n - 1].operation,
               pstate_status_string(rec.ev[rec.n - 1].status));
    RANK_CHECK(self, pstate_wait(rr) == PSTATE_ERR_ABORTED, "wait after finalize: %s\n", pstate_last_error());
  } else {
    RANK_CHECK(self, rec.n == n_want, "rank 1: %d events after finalize\n", rec.n);
  }
  return 0;
}

static void test_hooks_see_requests_and_batches(void **state) {
  (void)state;
  unsetenv("PSTATE_SHM");
  assert_int_equal(pstate_test_run_processes(2, 120, requests_rank, NULL, NULL), 0);
  setenv("PSTATE_SHM", "0", 1);
  assert_int_equal(pstate_test_run_processes(2, 120, requests_rank, NULL, NULL), 0);
  unsetenv("PSTATE_SHM");
}

static void test_hooks_see_every_call_over_shared_memory(void **state) {
  (void)state;
  unsetenv("PSTATE_SHM");
  assert_int_equal(pstate_test_run_processes(2, 120, rank_main, NULL, NULL), 0);
}

static void test_hooks_see_every_call_over_ucx(void **state) {
  (void)state;
  setenv("PSTATE_SHM", "0", 1);
  assert_int_equal(pstate_test_run_processes(2, 120, rank_main, (void *)1, NULL), 0);
  unsetenv("PSTATE_SHM");
}

static void test_nan_check_refuses_on_every_rank(void **state) {
  (void)state;
  setenv("PSTATE_NAN_CHECK", "1", 1);
  assert_int_equal(pstate_test_run_processes(2, 120, nan_rank, NULL, NULL), 0);
  setenv("PSTATE_SHM", "0", 1);
  assert_int_equal(pstate_test_run_processes(2, 120, nan_rank, NULL, NULL), 0);
  unsetenv("PSTATE_SHM");
  unsetenv("PSTATE_NAN_CHECK");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hooks_see_every_call_over_shared_memory),
      cmocka_unit_test(test_hooks_see_every_call_over_ucx),
      cmocka_unit_test(test_nan_check_refuses_on_every_rank),
      cmocka_unit_test(test_hooks_see_requests_and_batches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
