/*
 * test_tensor_dict.c — broadcast_tensor_dict / send_tensor_dict / recv_tensor_dict on CPU
 * contexts, real processes over UCX.
 *
 * The reference dict mixes dtypes and shapes: a vector, a matrix, an empty tensor (a zero
 * extent), a scalar (ndim 0), a 3-d tensor, an fp8 vector and one CPU tensor larger than the
 * library's inline limit (so both the in-message and the separate payload paths run). Its bytes
 * are a pattern of (sender, tensor index, byte index), computed here, so every receiver checks
 * names, dtypes, shapes, sizes and contents without trusting the sender. Receivers record what
 * the allocation callback is asked for into a test-owned table and free it afterwards.
 */
/* cmocka.h needs these first */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"

static int contains(const char *hay, const char *needle) {
  return strstr(hay, needle) != NULL;
}

/* ---- the reference dict ------------------------------------------------------------------- */

#define N_TENSORS 7
#define MAX_DIMS 3
#define BIG_ELEMENTS 70001 /* bfloat16: 140002 bytes, past the 64 KiB inline limit */

typedef struct ref_tensor_t {
  const char *name;
  pstate_dtype_t dtype;
  int ndim;
  int64_t shape[MAX_DIMS];
} ref_tensor_t;

static const ref_tensor_t kRef[N_TENSORS] = {
    {"input_ids", PSTATE_INT64, 1, {7}},
    {"positions", PSTATE_INT32, 2, {2, 3}},
    {"empty", PSTATE_FLOAT32, 2, {0, 5}},
    {"scale", PSTATE_FLOAT64, 0, {0}},
    {"hidden", PSTATE_BFLOAT16, 1, {BIG_ELEMENTS}},
    {"mask", PSTATE_UINT8, 3, {3, 1, 4}},
    {"fp8_scales", PSTATE_FP8_E4M3, 1, {5}},
};

static size_t ref_bytes(const ref_tensor_t *t) {
  size_t n = pstate_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; ++d) n *= (size_t)t->shape[d];
  return n;
}

static uint8_t pattern(int sender, int tensor, size_t i) {
  return (uint8_t)(sender * 31 + tensor * 7 + (int)(i % 251));
}

/* The reference dict of rank `sender`, in storage the caller frees with free_dict. */
static void make_dict(int sender, pstate_tensor_t *out) {
  for (int k = 0; k < N_TENSORS; ++k) {
    size_t bytes = ref_bytes(&kRef[k]);
    uint8_t *data = bytes ? malloc(bytes) : NULL;
    for (size_t i = 0; i < bytes; ++i) data[i] = pattern(sender, k, i);
    pstate_tensor_t t = PSTATE_TENSOR_INIT;
    t.name = kRef[k].name;
    t.dtype = kRef[k].dtype;
    t.ndim = kRef[k].ndim;
    t.shape = kRef[k].ndim ? kRef[k].shape : NULL;
    t.data = data;
    t.device = PSTATE_DEVICE_CPU;
    out[k] = t;
  }
}

static void free_dict(pstate_tensor_t *dict, int n) {
  for (int k = 0; k < n; ++k) free((void *)dict[k].data);
}

/* ---- what a receiver was given -------------------------------------------------------------- */

typedef struct got_tensor_t {
  char name[32];
  pstate_dtype_t dtype;
  int ndim;
  int64_t shape[MAX_DIMS];
  size_t bytes;
  pstate_device_t device;
  void *data;
} got_tensor_t;

typedef struct got_dict_t {
  got_tensor_t t[16];
  int n;
  int fail_at; /* the callback returns NULL for this tensor index (-1: never) */
} got_dict_t;

static void *record_alloc(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                          size_t bytes, pstate_device_t device) {
  got_dict_t *got = user;
  if (got->n >= 16) return NULL;
  got_tensor_t *t = &got->t[got->n];
  int index = got->n++;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dtype;
  t->ndim = ndim;
  for (int d = 0; d < ndim && d < MAX_DIMS; ++d) t->shape[d] = shape[d];
  t->bytes = bytes;
  t->device = device;
  t->data = index == got->fail_at ? NULL : malloc(bytes ? bytes : 1);
  return t->data;
}

static void got_init(got_dict_t *got, int fail_at) {
  memset(got, 0, sizeof *got);
  got->fail_at = fail_at;
}

static void got_free(got_dict_t *got) {
  for (int k = 0; k < got->n; ++k) free(got->t[k].data);
  got->n = 0;
}

/* Checks that *got is sender's reference dict. */
static int check_got(const pstate_test_rank_t *self, const got_dict_t *got, int sender, const char *what) {
  RANK_CHECK(self, got->n == N_TENSORS, "%s: %d tensors, want %d", what, got->n, N_TENSORS);
  for (int k = 0; k < N_TENSORS; ++k) {
    const got_tensor_t *t = &got->t[k];
    RANK_CHECK(self, strcmp(t->name, kRef[k].name) == 0, "%s: tensor %d named %s, want %s", what, k, t->name,
               kRef[k].name);
    RANK_CHECK(self, t->dtype == kRef[k].dtype && t->ndim == kRef[k].ndim && t->device == PSTATE_DEVICE_CPU,
               "%s: %s: dtype %d ndim %d device %d", what, t->name, t->dtype, t->ndim, t->device);
    for (int d = 0; d < t->ndim; ++d)
      RANK_CHECK(self, t->shape[d] == kRef[k].shape[d], "%s: %s: shape[%d] %lld", what, t->name, d,
                 (long long)t->shape[d]);
    RANK_CHECK(self, t->bytes == ref_bytes(&kRef[k]), "%s: %s: %zu bytes", what, t->name, t->bytes);
    const uint8_t *b = t->data;
    for (size_t i = 0; i < t->bytes; ++i)
      RANK_CHECK(self, b[i] == pattern(sender, k, i), "%s: %s byte %zu: %u want %u", what, t->name, i, b[i],
                 pattern(sender, k, i));
  }
  return 0;
}

static pstate_group_t *world_of(pstate_t *ps) {
  pstate_group_t *g = NULL;
  return pstate_get_group(ps, PSTATE_GROUP_WORLD, &g) == PSTATE_OK ? g : NULL;
}

/* ---- broadcast -------------------------------------------------------------------------------- */

static int broadcast_from_every_root(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = world_of(ps);
  for (int root = 0; root < self->world_size; ++root) {
    char what[32];
    snprintf(what, sizeof what, "broadcast from %d", root);
    if (self->rank == root) {
      pstate_tensor_t dict[N_TENSORS];
      make_dict(root, dict);
      RANK_OK(self, pstate_broadcast_tensor_dict(g, dict, N_TENSORS, root, NULL, NULL, NULL));
      free_dict(dict, N_TENSORS);
    } else {
      got_dict_t got;
      got_init(&got, -1);
      RANK_OK(self, pstate_broadcast_tensor_dict(g, NULL, 0, root, record_alloc, &got, NULL));
      if (check_got(self, &got, root, what)) return 1;
      got_free(&got);
    }
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_broadcast_tensor_dict_from_every_root_mixed_dtypes_and_shapes(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, broadcast_from_every_root, NULL, NULL), 0);
}

static int broadcast_empty_dict(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = world_of(ps);
  got_dict_t got;
  got_init(&got, -1);
  RANK_OK(self, pstate_broadcast_tensor_dict(g, NULL, 0, 1, self->rank == 1 ? NULL : record_alloc, &got, NULL));
  RANK_CHECK(self, got.n == 0, "an empty dict asked for %d allocations", got.n);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_broadcast_empty_dict_calls_no_allocation(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, broadcast_empty_dict, NULL, NULL), 0);
}

/* ---- send / recv -------------------------------------------------------------------------------- */

/* Pairs (0,1), (2,3): the even rank sends first, then the odd one. */
static int send_recv_pairs(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = world_of(ps);
  int partner = self->rank ^ 1;
  for (int round = 0; round < 2; ++round) {
    int sender = round == 0 ? (self->rank & ~1) : (self->rank | 1);
    if (self->rank == sender) {
      pstate_tensor_t dict[N_TENSORS];
      make_dict(self->rank, dict);
      RANK_OK(self, pstate_send_tensor_dict(g, dict, N_TENSORS, partner, NULL));
      free_dict(dict, N_TENSORS);
    } else {
      got_dict_t got;
      got_init(&got, -1);
      RANK_OK(self, pstate_recv_tensor_dict(g, partner, record_alloc, &got, NULL));
      if (check_got(self, &got, partner, "recv")) return 1;
      got_free(&got);
    }
  }
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_send_recv_tensor_dict_between_pairs(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 120, send_recv_pairs, NULL, NULL), 0);
}

/* ---- failures that must not leave a rank waiting ---------------------------------------------------- */

/* Rank 1's callback fails on the big tensor (index 4): rank 1 gets NO_MEMORY naming it, the
 * others get the dict, and the group stays in step (the next broadcast works everywhere). */
static int alloc_failure_on_one_receiver(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = world_of(ps);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (self->rank == 0) {
      pstate_tensor_t dict[N_TENSORS];
      make_dict(0, dict);
      RANK_OK(self, pstate_broadcast_tensor_dict(g, dict, N_TENSORS, 0, NULL, NULL, NULL));
      free_dict(dict, N_TENSORS);
      continue;
    }
    got_dict_t got;
    got_init(&got, attempt == 0 && self->rank == 1 ? 4 : -1);
    pstate_status_t s = pstate_broadcast_tensor_dict(g, NULL, 0, 0, record_alloc, &got, NULL);
    if (attempt == 0 && self->rank == 1) {
      RANK_CHECK(self, s == PSTATE_ERR_NO_MEMORY, "failed alloc: %s (%s)", pstate_status_string(s),
                 pstate_last_error());
      RANK_CHECK(self, contains(pstate_last_error(), "hidden") && contains(pstate_last_error(), "NULL"),
                 "message names the tensor: %s", pstate_last_error());
      RANK_CHECK(self, got.n == 5, "no allocation after the failed one: %d calls", got.n);
    } else {
      RANK_OK(self, s);
      if (check_got(self, &got, 0, "broadcast")) return 1;
    }
    got_free(&got);
  }
  RANK_OK(self, pstate_barrier(g));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_alloc_failure_fails_that_rank_only_and_keeps_the_group_in_step(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(3, 120, alloc_failure_on_one_receiver, NULL, NULL), 0);
}

typedef struct refusal_case_t {
  int kind; /* 0: duplicate name, 1: CUDA tensor in a CPU context, 2: negative extent */
  const char *phrase;
} refusal_case_t;

/* The root's bad dict fails the root with INVALID_ARGUMENT and the receivers with the root's
 * reason at once (no timeout), and the group stays usable. Also point to point. */
static int refused_dict(const pstate_test_rank_t *self) {
  const refusal_case_t *c = self->arg;
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = world_of(ps);
  for (int p2p = 0; p2p < 2; ++p2p) {
    pstate_status_t s;
    if (self->rank == 0) {
      pstate_tensor_t dict[N_TENSORS];
      make_dict(0, dict);
      if (c->kind == 0) dict[3].name = dict[1].name;
      if (c->kind == 1) dict[5].device = PSTATE_DEVICE_CUDA;
      static const int64_t bad_shape[2] = {2, -1};
      if (c->kind == 2) dict[1].shape = bad_shape;
      s = p2p ? pstate_send_tensor_dict(g, dict, N_TENSORS, 1, NULL)
              : pstate_broadcast_tensor_dict(g, dict, N_TENSORS, 0, NULL, NULL, NULL);
      free_dict(dict, N_TENSORS);
    } else if (p2p && self->rank != 1) {
      continue;
    } else {
      got_dict_t got;
      got_init(&got, -1);
      s = p2p ? pstate_recv_tensor_dict(g, 0, record_alloc, &got, NULL)
              : pstate_broadcast_tensor_dict(g, NULL, 0, 0, record_alloc, &got, NULL);
      RANK_CHECK(self, got.n == 0, "a refused dict asked for %d allocations", got.n);
      RANK_CHECK(self, s != PSTATE_ERR_INVALID_ARGUMENT || contains(pstate_last_error(), "refused"),
                 "receiver message: %s", pstate_last_error());
    }
    RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT, "%s: %s (%s)", p2p ? "p2p" : "broadcast",
               pstate_status_string(s), pstate_last_error());
    RANK_CHECK(self, contains(pstate_last_error(), c->phrase), "message lacks '%s': %s", c->phrase,
               pstate_last_error());
  }
  int32_t v = 1;
  RANK_OK(self, pstate_all_reduce(g, &v, &v, 1, PSTATE_INT32, PSTATE_SUM, NULL));
  RANK_CHECK(self, v == self->world_size, "all_reduce after a refused dict: %d", v);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_duplicate_names_are_refused_on_every_rank(void **state) {
  (void)state;
  refusal_case_t c = {0, "repeats a name"};
  assert_int_equal(pstate_test_run_processes(3, 120, refused_dict, &c, NULL), 0);
}

static void test_cuda_tensor_in_cpu_context_is_refused_on_every_rank(void **state) {
  (void)state;
  refusal_case_t c = {1, "CUDA tensor in a CPU context"};
  assert_int_equal(pstate_test_run_processes(3, 120, refused_dict, &c, NULL), 0);
}

static void test_negative_extent_is_refused_on_every_rank(void **state) {
  (void)state;
  refusal_case_t c = {2, "shape[1] is -1"};
  assert_int_equal(pstate_test_run_processes(3, 120, refused_dict, &c, NULL), 0);
}

/* Arguments every rank can check itself: refused on every rank, no data sent. */
static int local_argument_errors(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 60000, &ps));
  pstate_group_t *g = world_of(ps);
  got_dict_t got;
  got_init(&got, -1);
  int not_a_stream = 0;
  RANK_CHECK(
      self,
      pstate_broadcast_tensor_dict(g, NULL, 0, 0, record_alloc, &got, &not_a_stream) == PSTATE_ERR_INVALID_ARGUMENT &&
          contains(pstate_last_error(), "stream"),
      "stream in a CPU context: %s", pstate_last_error());
  RANK_CHECK(self, pstate_broadcast_tensor_dict(g, NULL, 0, 5, record_alloc, &got, NULL) == PSTATE_ERR_INVALID_ARGUMENT,
             "src out of range: %s", pstate_last_error());
  if (self->rank != 0)
    RANK_CHECK(self,
               pstate_broadcast_tensor_dict(g, NULL, 0, 0, NULL, NULL, NULL) == PSTATE_ERR_INVALID_ARGUMENT &&
                   contains(pstate_last_error(), "alloc"),
               "receiver without alloc: %s", pstate_last_error());
  else
    RANK_CHECK(self,
               pstate_broadcast_tensor_dict(g, NULL, 2, 0, NULL, NULL, NULL) == PSTATE_ERR_INVALID_ARGUMENT &&
                   contains(pstate_last_error(), "tensors"),
               "NULL tensors with count 2: %s", pstate_last_error());
  RANK_CHECK(self, pstate_send_tensor_dict(g, NULL, 0, self->rank, NULL) == PSTATE_ERR_INVALID_ARGUMENT,
             "send to self: %s", pstate_last_error());
  RANK_CHECK(self, pstate_recv_tensor_dict(g, self->rank, record_alloc, &got, NULL) == PSTATE_ERR_INVALID_ARGUMENT,
             "recv from self: %s", pstate_last_error());
  RANK_CHECK(self, pstate_recv_tensor_dict(g, self->rank ^ 1, NULL, NULL, NULL) == PSTATE_ERR_INVALID_ARGUMENT,
             "recv without alloc: %s", pstate_last_error());
  RANK_CHECK(self,
             pstate_broadcast_tensor_dict(NULL, NULL, 0, 0, record_alloc, &got, NULL) == PSTATE_ERR_INVALID_ARGUMENT,
             "NULL group: %s", pstate_last_error());
  RANK_CHECK(self, got.n == 0, "allocations on refused calls: %d", got.n);
  RANK_OK(self, pstate_barrier(g));
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_local_argument_errors_send_nothing(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(2, 60, local_argument_errors, NULL, NULL), 0);
}

/* Ranks out of step (an object where a dict is expected) get MISMATCH on both sides, each naming
 * the other's call, instead of the dict's metadata as the object (issue 27, item 4): the dict's
 * metadata travels as an exchange of its own kind. Over shared memory and over UCX. */
static int object_where_dict_expected(const pstate_test_rank_t *self) {
  if (*(const int *)self->arg) setenv("PSTATE_SHM", "0", 1);
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 20000, &ps));
  pstate_group_t *g = world_of(ps);
  if (self->rank == 0) {
    const char text[] = "not a dict";
    pstate_bytes_t out = {NULL, 0};
    pstate_status_t s = pstate_broadcast_object(g, text, sizeof text, 0, &out);
    RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && contains(pstate_last_error(), "broadcast_tensor_dict"), "%s: %s",
               pstate_status_string(s), pstate_last_error());
    pstate_bytes_free(&out);
    pstate_abort(ps);
    return 0;
  }
  got_dict_t got;
  got_init(&got, -1);
  pstate_status_t s = pstate_broadcast_tensor_dict(g, NULL, 0, 0, record_alloc, &got, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_MISMATCH && contains(pstate_last_error(), "broadcast_object"), "%s: %s",
             pstate_status_string(s), pstate_last_error());
  RANK_CHECK(self, got.n == 0, "allocations for garbage: %d", got.n);
  pstate_abort(ps);
  return 0;
}

static void test_an_object_where_a_dict_is_expected_is_mismatch(void **state) {
  (void)state;
  for (int ucx = 0; ucx < 2; ++ucx)
    assert_int_equal(pstate_test_run_processes(2, 60, object_where_dict_expected, &ucx, NULL), 0);
}

/* The function table carries the new entry points at its end. */
static void test_api_table_has_the_tensor_dict_entries(void **state) {
  (void)state;
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  assert_non_null(api);
  assert_true(api->struct_size >= offsetof(pstate_api_t, recv_tensor_dict) + sizeof api->recv_tensor_dict);
  assert_ptr_equal(api->broadcast_tensor_dict, pstate_broadcast_tensor_dict);
  assert_ptr_equal(api->send_tensor_dict, pstate_send_tensor_dict);
  assert_ptr_equal(api->recv_tensor_dict, pstate_recv_tensor_dict);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broadcast_tensor_dict_from_every_root_mixed_dtypes_and_shapes),
      cmocka_unit_test(test_broadcast_empty_dict_calls_no_allocation),
      cmocka_unit_test(test_send_recv_tensor_dict_between_pairs),
      cmocka_unit_test(test_alloc_failure_fails_that_rank_only_and_keeps_the_group_in_step),
      cmocka_unit_test(test_duplicate_names_are_refused_on_every_rank),
      cmocka_unit_test(test_cuda_tensor_in_cpu_context_is_refused_on_every_rank),
      cmocka_unit_test(test_negative_extent_is_refused_on_every_rank),
      cmocka_unit_test(test_local_argument_errors_send_nothing),
      cmocka_unit_test(test_an_object_where_a_dict_is_expected_is_mismatch),
      cmocka_unit_test(test_api_table_has_the_tensor_dict_entries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
