/*
 * test_tensor_dict_sliced.c — pstate_send_tensor_dict_sliced / pstate_recv_tensor_dict_sliced
 * (SGLang's and vLLM's all_gather_group) across a pipeline boundary with tp 2 on each stage:
 * world 4, tp 2 x pp 2; stage 0 = ranks 0,1 sends over the pp group to stage 1 = ranks 2,3, each
 * sender to the receiver at its tp rank, ag = the tp group on both sides.
 *
 * The senders hold DIFFERENT values (sender tp rank k: (k+1)*1000 + i), so the gathered result
 * proves the slicing: element i of a sliced tensor must come from the sender whose slice holds it
 * (slice k = elements [k*n/2, (k+1)*n/2)), while a tensor that does not divide by 2 (and an empty
 * one) arrives whole from the receiver's own sender. A 2-D tensor keeps its shape in alloc, a
 * tensor past the inline size (100000 floats) moves on its own. Processes and threads; ag NULL or
 * of another rank is refused before anything moves; the dlopen table reaches both calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"

#define BIG 100000

typedef struct received_t {
  int calls;
  char names[4][16];
  int ndim[4];
  int64_t shape[4][2];
  size_t bytes[4];
  void *mem[4];
} received_t;

static void *alloc_cb(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                      size_t bytes, pstate_device_t device) {
  (void)dtype, (void)device;
  received_t *r = (received_t *)user;
  int i = r->calls++;
  if (i >= 4) return NULL;
  snprintf(r->names[i], sizeof r->names[i], "%s", name);
  r->ndim[i] = ndim;
  for (int d = 0; d < ndim && d < 2; ++d) r->shape[i][d] = shape[d];
  r->bytes[i] = bytes;
  r->mem[i] = malloc(bytes > 0 ? bytes : 1);
  return r->mem[i];
}

static float value(int k, size_t i) { return (float)((k + 1) * 1000 + (int)(i % 4096)); }

static int sliced_rank(const pstate_test_rank_t *self) {
  pstate_t *ps = NULL;
  RANK_OK(self, pstate_test_init(self, 30000, &ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  RANK_OK(self, pstate_initialize_model_parallel(ps, &cfg));
  pstate_group_t *pp = NULL, *tp = NULL;
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
  RANK_OK(self, pstate_get_group(ps, PSTATE_GROUP_ATTN_TP, &tp));
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  RANK_OK(self, pstate_group_info(tp, &info));
  const int k = info.rank_in_group, sender = self->rank < 2;
  /* refusals, local on both sides: ag NULL */
  pstate_tensor_t none = PSTATE_TENSOR_INIT;
  received_t r;
  memset(&r, 0, sizeof r);
  pstate_status_t s = sender ? pstate_send_tensor_dict_sliced(pp, &none, 0, 1, NULL, NULL)
                             : pstate_recv_tensor_dict_sliced(pp, 0, NULL, alloc_cb, &r, NULL);
  RANK_CHECK(self, s == PSTATE_ERR_INVALID_ARGUMENT && strstr(pstate_last_error(), "NULL"), "ag NULL: %s",
             pstate_last_error());
  /* the dict: 2-D sliced, odd (whole), big sliced, empty (whole) */
  float hidden[4 * 6], odd[3], *big = malloc(sizeof(float) * BIG);
  RANK_CHECK(self, big != NULL, "malloc");
  for (size_t i = 0; i < 24; ++i) hidden[i] = value(k, i);
  for (size_t i = 0; i < 3; ++i) odd[i] = value(k, i);
  for (size_t i = 0; i < BIG; ++i) big[i] = value(k, i);
  int64_t shape_hidden[2] = {4, 6}, shape_odd[1] = {3}, shape_big[1] = {BIG}, shape_empty[1] = {0};
  pstate_tensor_t t[4] = {PSTATE_TENSOR_INIT, PSTATE_TENSOR_INIT, PSTATE_TENSOR_INIT, PSTATE_TENSOR_INIT};
  const char *names[4] = {"hidden", "odd", "big", "empty"};
  int64_t *shapes[4] = {shape_hidden, shape_odd, shape_big, shape_empty};
  int ndims[4] = {2, 1, 1, 1};
  const void *datas[4] = {hidden, odd, big, NULL};
  for (int i = 0; i < 4; ++i) {
    t[i].name = names[i];
    t[i].dtype = PSTATE_FLOAT32;
    t[i].ndim = ndims[i];
    t[i].shape = shapes[i];
    t[i].data = datas[i];
  }
  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);
  RANK_CHECK(self, api != NULL && api->send_tensor_dict_sliced == pstate_send_tensor_dict_sliced &&
                       api->recv_tensor_dict_sliced == pstate_recv_tensor_dict_sliced,
             "dlopen table");
  for (int round = 0; round < 2; ++round) { /* twice: the second through the table */
    memset(&r, 0, sizeof r);
    if (sender) {
      RANK_OK(self, round == 0 ? pstate_send_tensor_dict_sliced(pp, t, 4, 1, tp, NULL)
                               : api->send_tensor_dict_sliced(pp, t, 4, 1, tp, NULL));
      continue;
    }
    RANK_OK(self, round == 0 ? pstate_recv_tensor_dict_sliced(pp, 0, tp, alloc_cb, &r, NULL)
                             : api->recv_tensor_dict_sliced(pp, 0, tp, alloc_cb, &r, NULL));
    RANK_CHECK(self, r.calls == 4, "alloc calls %d", r.calls);
    RANK_CHECK(self, strcmp(r.names[0], "hidden") == 0 && r.ndim[0] == 2 && r.shape[0][0] == 4 &&
                         r.shape[0][1] == 6 && r.bytes[0] == sizeof hidden,
               "hidden asked as %s ndim %d bytes %zu", r.names[0], r.ndim[0], r.bytes[0]);
    RANK_CHECK(self, r.bytes[1] == sizeof odd && r.bytes[2] == sizeof(float) * BIG && r.bytes[3] == 0,
               "sizes asked: %zu %zu %zu", r.bytes[1], r.bytes[2], r.bytes[3]);
    const float *h = r.mem[0], *o = r.mem[1], *b = r.mem[2];
    for (size_t i = 0; i < 24; ++i)
      RANK_CHECK(self, h[i] == value((int)(i / 12), i), "hidden[%zu] = %g, want %g", i, h[i], value((int)(i / 12), i));
    for (size_t i = 0; i < 3; ++i) RANK_CHECK(self, o[i] == value(k, i), "odd[%zu] = %g (whole, own sender)", i, o[i]);
    for (size_t i = 0; i < BIG; ++i)
      RANK_CHECK(self, b[i] == value((int)(i / (BIG / 2)), i), "big[%zu] = %g", i, b[i]);
    for (int i = 0; i < 4; ++i) free(r.mem[i]);
  }
  free(big);
  RANK_OK(self, pstate_finalize(ps));
  return 0;
}

static void test_sliced_dict_across_a_pp_boundary_with_tp_2(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_processes(4, 60, sliced_rank, NULL, NULL), 0);
}

static void test_sliced_dict_across_a_pp_boundary_with_tp_2_threads(void **state) {
  (void)state;
  assert_int_equal(pstate_test_run_threads(4, 60, sliced_rank, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sliced_dict_across_a_pp_boundary_with_tp_2),
      cmocka_unit_test(test_sliced_dict_across_a_pp_boundary_with_tp_2_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
