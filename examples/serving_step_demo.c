/*
 * serving_step_demo.c — what one serving step of a TP=2 x PP=2 model does with pstate.
 *
 * Run under the launcher:   pstate run -n 4 -- ./serving_step_demo
 *
 * Each rank: joins the job (pstate_init, env://), cuts the world into SGLang's groups
 * (tp 2 x pp 2), prints its place in them, then runs a serving step several times:
 *   1. TP all-reduce of the "hidden states" after a row-parallel matmul (each TP rank holds a
 *      partial sum; the result is the full sum),
 *   2. PP send of the activations from stage 0 to stage 1,
 *   3. TP rank 0 broadcasts the scheduler's batch (variable-length bytes) to its TP peers,
 *   4. TP all-gather of the vocabulary-sharded logits.
 * Every result is checked against values computed here independently; per-operation median
 * times are printed. Exit status 0 only when every check passed.
 */
#include <pstate/pstate.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HIDDEN 4096
#define VOCAB_SHARD 8000
#define STEPS 20

static int failures = 0;

#define CHECK_OK(call)                                                                            \
  do {                                                                                            \
    pstate_status_t s_ = (call);                                                                  \
    if (s_ != PSTATE_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, pstate_status_string(s_), pstate_last_error()); \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static void expect(int ok, const char *what, int step) {
  if (!ok) {
    fprintf(stderr, "CHECK FAILED: %s (step %d)\n", what, step);
    failures++;
  }
}

static void print_groups(pstate_t *ps) {
  static const pstate_group_kind_t kinds[] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_PP,
                                              PSTATE_GROUP_ATTN_TP, PSTATE_GROUP_MOE_EP};
  char line[512];
  size_t used = 0;
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; ++k) {
    pstate_group_t *g = NULL;
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    int ranks[16];
    size_t n = 0;
    CHECK_OK(pstate_get_group(ps, kinds[k], &g));
    CHECK_OK(pstate_group_info(g, &info));
    CHECK_OK(pstate_group_ranks(g, ranks, 16, &n));
    used += (size_t)snprintf(line + used, sizeof line - used, "%s%s[", k ? "  " : "", info.name);
    for (size_t i = 0; i < n; ++i) used += (size_t)snprintf(line + used, sizeof line - used, "%s%d", i ? "," : "", ranks[i]);
    used += (size_t)snprintf(line + used, sizeof line - used, "]@%d", info.rank_in_group);
  }
  printf("groups: %s\n", line);
}

int main(void) {
  pstate_t *ps = NULL;
  pstate_init_params_t params = PSTATE_INIT_PARAMS_INIT;
  CHECK_OK(pstate_init(&params, &ps));

  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  CHECK_OK(pstate_initialize_model_parallel(ps, &cfg));

  pstate_group_t *tp = NULL, *pp = NULL;
  pstate_group_info_t tpi = PSTATE_GROUP_INFO_INIT, ppi = PSTATE_GROUP_INFO_INIT;
  CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_TP, &tp));
  CHECK_OK(pstate_get_group(ps, PSTATE_GROUP_PP, &pp));
  CHECK_OK(pstate_group_info(tp, &tpi));
  CHECK_OK(pstate_group_info(pp, &ppi));
  int rank = tpi.rank, tp_rank = tpi.rank_in_group, stage = ppi.rank_in_group;
  print_groups(ps);

  float *hidden = malloc(HIDDEN * sizeof(float));
  float *act = malloc(HIDDEN * sizeof(float));
  float *shard = malloc(VOCAB_SHARD * sizeof(float));
  float *logits = malloc(2 * VOCAB_SHARD * sizeof(float));
  double t_ar[STEPS], t_pp[STEPS], t_bc[STEPS], t_ag[STEPS];

  for (int step = 0; step < STEPS; ++step) {
    /* 1. row-parallel matmul partials: rank r of the TP group holds (i % 97) * (tp_rank + 1) + step */
    for (int i = 0; i < HIDDEN; ++i) hidden[i] = (float)((i % 97) * (tp_rank + 1) + step);
    double t0 = now_us();
    CHECK_OK(pstate_tp_allreduce(ps, hidden, HIDDEN, PSTATE_FLOAT32, PSTATE_SUM, NULL));
    t_ar[step] = now_us() - t0;
    for (int i = 0; i < HIDDEN; ++i) {
      float want = (float)((i % 97) * 3 + 2 * step); /* (x*1+s) + (x*2+s) */
      if (hidden[i] != want) { expect(0, "tp all_reduce of hidden states", step); break; }
    }

    /* 2. stage 0 -> stage 1: activations = hidden states + stage marker */
    t0 = now_us();
    if (stage == 0) {
      for (int i = 0; i < HIDDEN; ++i) act[i] = hidden[i] + 0.5f;
      CHECK_OK(pstate_send(pp, act, HIDDEN, PSTATE_FLOAT32, 1, NULL));
    } else {
      CHECK_OK(pstate_recv(pp, act, HIDDEN, PSTATE_FLOAT32, 0, NULL));
      for (int i = 0; i < HIDDEN; ++i) {
        if (act[i] != (float)((i % 97) * 3 + 2 * step) + 0.5f) { expect(0, "pp activations from stage 0", step); break; }
      }
    }
    t_pp[step] = now_us() - t0;

    /* 3. the scheduler batch: a variable-length description made by TP rank 0 */
    char batch[256];
    int len = snprintf(batch, sizeof batch, "{\"step\": %d, \"stage\": %d, \"requests\": [%d, %d, %d]}", step, stage,
                       step * 3, step * 3 + 1, step * 3 + 2);
    pstate_bytes_t got = {NULL, 0};
    t0 = now_us();
    CHECK_OK(pstate_broadcast_object(tp, tp_rank == 0 ? batch : NULL, tp_rank == 0 ? (size_t)len : 0, 0, &got));
    t_bc[step] = now_us() - t0;
    expect(got.size == (size_t)len && memcmp(got.data, batch, (size_t)len) == 0, "tp broadcast_object of the batch",
           step);
    pstate_bytes_free(&got);

    /* 4. logits sharded over the vocabulary: shard of TP rank r holds r * VOCAB_SHARD + i + step */
    for (int i = 0; i < VOCAB_SHARD; ++i) shard[i] = (float)(tp_rank * VOCAB_SHARD + i + step);
    t0 = now_us();
    CHECK_OK(pstate_tp_allgather(ps, shard, logits, VOCAB_SHARD, PSTATE_FLOAT32, NULL));
    t_ag[step] = now_us() - t0;
    for (int i = 0; i < 2 * VOCAB_SHARD; ++i) {
      if (logits[i] != (float)(i + step)) { expect(0, "tp all_gather of logits", step); break; }
    }
  }

  printf("rank %d (tp %d, stage %d): %d steps, median us: tp_allreduce %.1f (%d B)  pp send/recv %.1f (%d B)  "
         "broadcast_object %.1f  tp_allgather %.1f (%d B)  -> %s\n",
         rank, tp_rank, stage, STEPS, median(t_ar, STEPS), (int)(HIDDEN * sizeof(float)), median(t_pp, STEPS),
         (int)(HIDDEN * sizeof(float)), median(t_bc, STEPS), median(t_ag, STEPS),
         (int)(2 * VOCAB_SHARD * sizeof(float)), failures ? "CHECKS FAILED" : "all checks passed");

  free(hidden);
  free(act);
  free(shard);
  free(logits);
  CHECK_OK(pstate_destroy_model_parallel(ps));
  CHECK_OK(pstate_finalize(ps));
  return failures ? 1 : 0;
}
