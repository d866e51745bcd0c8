/*
 * test_threads_one_context.c — one thread at a time drives a pstate_t: a second thread that
 * enters while a call of the same context runs gets PSTATE_ERR_BUSY naming the rule,
 * nothing it passed is touched, and nothing crashes.
 *
 * Hammer: 2 ranks as processes, each with 2 threads calling all_reduce on the world group of
 * their shared context as fast as they can (8 and 65536 elements; shared memory and UCX). Every
 * call must return OK or BUSY; every OK result must be the right sum (each thread has its
 * own buffers and both threads of a rank send the same values, so any pairing of calls across the
 * ranks is a correct one); a refused call leaves its recv buffer as it was. The threads of a rank
 * stop after exactly TARGET successful calls together (a reservation counter, so the ranks make
 * the same number of calls and the last one has a partner).
 *
 * Teardown: while one thread is blocked in a barrier, another thread's all_reduce and
 * pstate_finalize return BUSY and free nothing; the context finalizes normally once the barrier
 * returns. (pstate_abort from another thread stops the call instead: test_abort_any_thread.c.)
 *
 * Re-entry: a pstate call on the same context from inside a pstate_alloc_fn callback is
 * BUSY too (the header forbids it), and the dict still arrives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"

static const char *const kRule = "one thread at a time drives a pstate_t";

typedef struct hammer_t {
  pstate_group_t *g;
  int rank, world;
  size_t n;
  int target;
  atomic_int reserved, ok, refused, failed;
  char error[512];
} hammer_t;

static uint32_t val(int rank, size_t i) { return (uint32_t)rank * 1000003u + (uint32_t)i; }

static void record(hammer_t *h, const char *what) {
  if (atomic_exchange(&h->failed, 1) == 0) snprintf(h->error, sizeof h->error, "%s", what);
}

static void *hammer_thread(void *arg) {
  hammer_t *h = arg;
  uint32_t *send = malloc(h->n * sizeof(uint32_t)), *recv = malloc(h->n * sizeof(uint32_t));
  for (size_t i = 0; i < h->n; ++i) send[i] = val(h->rank, i);
  char msg[512];
  while (!atomic_load(&h->failed)) {
    if (atomic_fetch_add(&h->reserved, 1) >= h->target) {  /* every slot is taken or done */
      atomic_fetch_sub(&h->reserved, 1);
      if (atomic_load(&h->ok) >= h->target) break;
      sched_yield();
      continue;
    }
    memset(recv, 0xab, h->n * sizeof(uint32_t));
    pstate_status_t s = pstate_all_reduce(h->g, send, recv, h->n, PSTATE_UINT32, PSTATE_SUM, NULL);
    if (s == PSTATE_ERR_BUSY) {
      atomic_fetch_sub(&h->reserved, 1);
      atomic_fetch_add(&h->refused, 1);
      if (strstr(pstate_last_error(), kRule) == NULL) {
        snprintf(msg, sizeof msg, "BUSY without the rule: %s", pstate_last_error());
        record(h, msg);
      }
      for (size_t i = 0; i < h->n; ++i)
        if (recv[i] != 0xababababu) {
          record(h, "a refused call wrote recv");
          break;
        }
      continue;
    }
    if (s != PSTATE_OK) {
      snprintf(msg, sizeof msg, "all_reduce -> %s: %s", pstate_status_string(s), pstate_last_error());
      record(h, msg);
      break;
    }
    for (size_t i = 0; i < h->n; ++i) {
      uint32_t want = 0;
      for (int q = 0; q < h->world; ++q) want += val(q, i);
      if (recv[i] != want) {
        snprintf(msg, sizeof msg, "OK call with a wrong sum at [%zu]: %u, want %u", i, recv[i], want);
        record(h, msg);
        break;
      }
    }
    atomic_fetch_add(&h->ok, 1);
  }
  free(send);
  free(recv);
  return NULL;
}

static int hammer_rank(const pstate_test_rank_t *self) {
  const int *ucx = self->arg;
  if (*ucx) setenv("PSTATE_SHM", "0", 1);
  else unsetenv("PSTATE_SHM");
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  const size_t sizes[] = {8, 65536};
  const int targets[] = {2000, 200};
  for (int k = 0; k < 2; ++k) {
    hammer_t h;
    memset(&h, 0, sizeof h);
    h.g = g;
    h.rank = self->rank;
    h.world = self->world_size;
    h.n = sizes[k];
    h.target = targets[k];
    pthread_t t[2];
    for (int i = 0; i < 2; ++i) RANK_CHECK(self, pthread_create(&t[i], NULL, hammer_thread, &h) == 0, "thread");
    for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
    RANK_CHECK(self, !atomic_load(&h.failed), "n %zu: %s", h.n, h.error);
    RANK_CHECK(self, atomic_load(&h.ok) == h.target, "n %zu: %d OK calls, want %d", h.n, atomic_load(&h.ok), h.target);
    fprintf(stderr, "rank %d n %zu: %d OK, %d refused with BUSY\n", self->rank, h.n, atomic_load(&h.ok),
            atomic_load(&h.refused));
    /* thousands collide in practice (a call waits for its partner while holding the context) */
    RANK_CHECK(self, atomic_load(&h.refused) > 0, "n %zu: the two threads never collided", h.n);
  }
  /* the context is intact: one more call from one thread */
  uint32_t x = 1;
  RANK_OK(self, pstate_all_reduce(g, &x, &x, 1, PSTATE_UINT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, x == (uint32_t)self->world_size, "after the hammer: %u", x);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_two_threads_on_one_context_get_ok_or_busy_never_wrong_data_shm(void **state) {
  (void)state;
  int ucx = 0;
  assert_int_equal(pstate_test_run_processes(2, 300, hammer_rank, &ucx, NULL), 0);
}

static void test_two_threads_on_one_context_get_ok_or_busy_never_wrong_data_ucx(void **state) {
  (void)state;
  int ucx = 1;
  assert_int_equal(pstate_test_run_processes(2, 300, hammer_rank, &ucx, NULL), 0);
}

/* ---- teardown while another thread is inside a call ------------------------------------------ */

typedef struct blocked_t {
  pstate_group_t *g;
  atomic_int entering;
  pstate_status_t status;
} blocked_t;

static void *barrier_thread(void *arg) {
  blocked_t *b = arg;
  atomic_store(&b->entering, 1);
  b->status = pstate_barrier(b->g);
  return NULL;
}

static int teardown_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  if (self->rank == 1) {
    usleep(1500 * 1000); /* rank 0's barrier waits for this long */
    RANK_OK(self, pstate_barrier(g));
  } else {
    blocked_t b = {g, 0, PSTATE_OK};
    pthread_t t;
    RANK_CHECK(self, pthread_create(&t, NULL, barrier_thread, &b) == 0, "thread");
    while (!atomic_load(&b.entering)) sched_yield();
    usleep(200 * 1000);
    float x = 1.0f;
    pstate_status_t s = pstate_all_reduce(g, &x, &x, 1, PSTATE_FLOAT32, PSTATE_SUM, NULL);
    RANK_CHECK(self, s == PSTATE_ERR_BUSY && strstr(pstate_last_error(), kRule) &&
                         strstr(pstate_last_error(), "inside pstate_barrier"), "all_reduce: %s %s",
               pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, x == 1.0f, "the refused all_reduce touched its buffer");
    s = pstate_finalize(ps);
    RANK_CHECK(self, s == PSTATE_ERR_BUSY && strstr(pstate_last_error(), "nothing freed"), "finalize: %s %s",
               pstate_status_string(s), pstate_last_error());
    pthread_join(t, NULL);
    RANK_CHECK(self, b.status == PSTATE_OK, "the blocked barrier: %s", pstate_status_string(b.status));
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_finalize_while_another_thread_is_inside_a_call_is_busy_and_frees_nothing(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, teardown_rank, NULL, NULL), 0);
}

/* ---- re-entry from an allocation callback -------------------------------------------------- */

typedef struct reentry_t {
  pstate_group_t *g;
  pstate_status_t inner;
  char inner_error[512];
  float storage[16];
} reentry_t;

static void *reentrant_alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                             size_t bytes, pstate_device_t device) {
  (void)name, (void)dtype, (void)ndim, (void)shape, (void)device;
  reentry_t *r = user;
  r->inner = pstate_barrier(r->g); /* the callback's own context: refused, the dict goes on */
  snprintf(r->inner_error, sizeof r->inner_error, "%s", pstate_last_error());
  return bytes <= sizeof r->storage ? r->storage : NULL;
}

static int reentry_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_group_t *g = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_WORLD, &g));
  float data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  pstate_tensor_t t = PSTATE_TENSOR_INIT;
  t.name = "x";
  t.ndim = 1;
  t.shape = shape;
  t.data = data;
  reentry_t r;
  memset(&r, 0, sizeof r);
  r.g = g;
  r.inner = PSTATE_OK;
  RANK_OK(self, pstate_broadcast_tensor_dict(g, &t, 1, 0, reentrant_alloc, &r, NULL));
  if (self->rank == 1) {
    RANK_CHECK(self, r.inner == PSTATE_ERR_BUSY && strstr(r.inner_error, kRule), "barrier from alloc: %s %s",
               pstate_status_string(r.inner), r.inner_error);
    RANK_CHECK(self, memcmp(r.storage, data, sizeof data) == 0, "the dict arrived");
  }
  RANK_OK(self, pstate_barrier(g)); /* the context is intact */
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_a_call_from_an_alloc_callback_on_its_own_context_is_busy(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 120, reentry_rank, NULL, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_threads_on_one_context_get_ok_or_busy_never_wrong_data_shm),
      cmocka_unit_test(test_two_threads_on_one_context_get_ok_or_busy_never_wrong_data_ucx),
      cmocka_unit_test(test_finalize_while_another_thread_is_inside_a_call_is_busy_and_frees_nothing),
      cmocka_unit_test(test_a_call_from_an_alloc_callback_on_its_own_context_is_busy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
