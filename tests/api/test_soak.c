/*
 * test_soak.c — a long random mix of collectives on 4 ranks, every result bit-exact against a
 * reference computed here.
 *
 * The ranks initialize model parallel (tp 2 x pp 2) and draw, from one seeded generator that
 * every rank runs identically, a sequence of operations: the group (world, tp or pp), the
 * operation (all_reduce, all_gather, reduce_scatter, broadcast, gather, all_to_all, reduce,
 * scatter, a send/recv exchange, barrier, broadcast_object, all_gather_object), the dtype, the
 * reduce op, the root and
 * the size (log-uniform, each rank's largest buffer at most 1 MiB, 0 included). Each rank's input
 * is a hash of (seed, operation number, global rank, element), so every rank can rebuild every
 * other rank's input and compute the expected output alone. Reductions draw their inputs from
 * sets where the exact result is representable in the dtype whatever the order of reduction
 * (integers of bounded width times small powers of two; PROD over {+-1, +-2}), so "bit-exact" is
 * well-defined: the expected bytes are the exact result written in the dtype; integer AVG
 * truncates toward zero (the header's contract). Data moves (gathers, broadcasts, all_to_all,
 * send/recv, objects) carry raw random bytes in any dtype, fp8 included; a reduction on fp8 must
 * answer PSTATE_ERR_UNSUPPORTED and leave the group usable.
 *
 * Length: PSTATE_SOAK_OPS operations (default 2000, the CI form; 100000 is the full soak:
 * `PSTATE_SOAK_OPS=100000 build/tests/test_soak`), PSTATE_SOAK_SEED (default 20240601). The same
 * mix also runs with the ranks as 4 threads of one process (PSTATE_SOAK_THREAD_OPS, default 300),
 * the form the TSan job runs.
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
#include "values.h"

#define SOAK_RANKS 4
#define MAX_BYTES (1u << 20)

enum { G_WORLD, G_TP, G_PP, G_COUNT };
static const pstate_group_kind_t kGroupKinds[G_COUNT] = {PSTATE_GROUP_WORLD, PSTATE_GROUP_TP, PSTATE_GROUP_PP};

typedef enum op_t {
  OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_BROADCAST, OP_GATHER, OP_ALL_TO_ALL, OP_REDUCE,
  OP_SCATTER, OP_SEND_RECV, OP_BARRIER, OP_BROADCAST_OBJECT, OP_ALL_GATHER_OBJECT, OP_COUNT
} op_t;
static const char *const kOpNames[OP_COUNT] = {"all_reduce", "all_gather", "reduce_scatter",   "broadcast",
                                               "gather",     "all_to_all", "reduce",           "scatter",
                                               "send_recv",  "barrier",    "broadcast_object", "all_gather_object"};
/* Cumulative weights out of 100. */
static const int kOpWeights[OP_COUNT] = {27, 38, 49, 58, 65, 74, 80, 86, 92, 94, 97, 100};

/* ---- deterministic randomness ------------------------------------------------------------------ */

static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) { return mix(mix(mix(mix(a) ^ b) ^ c) ^ d); }

typedef struct rng_t {
  uint64_t state;
} rng_t;
static uint64_t next(rng_t *r) { return mix(r->state++); }
static uint64_t below(rng_t *r, uint64_t n) { return n == 0 ? 0 : next(r) % n; }

/* ---- one drawn operation ----------------------------------------------------------------------- */

typedef struct plan_t {
  long index;
  int group;
  op_t op;
  pstate_dtype_t dtype;
  pstate_reduce_op_t rop;
  size_t count;  /* elements: per rank for gathers and all_to_all, of the result for reduce_scatter */
  int root;      /* group rank */
  int expect_unsupported;
} plan_t;

static size_t blocks_of(op_t op, int size) {
  return op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER || op == OP_GATHER || op == OP_ALL_TO_ALL || op == OP_SCATTER
             ? (size_t)size
             : 1;
}

static void draw(rng_t *rng, long index, const int *group_sizes, plan_t *p) {
  memset(p, 0, sizeof *p);
  p->index = index;
  p->group = (int)below(rng, G_COUNT);
  int w = (int)below(rng, 100);
  p->op = OP_ALL_REDUCE;
  while (w >= kOpWeights[p->op]) p->op = (op_t)(p->op + 1);
  p->dtype = (pstate_dtype_t)below(rng, PSTATE_DTYPE_COUNT);
  p->rop = (pstate_reduce_op_t)below(rng, PSTATE_REDUCE_OP_COUNT);
  int reduces = p->op == OP_ALL_REDUCE || p->op == OP_REDUCE_SCATTER || p->op == OP_REDUCE;
  if (reduces && (p->dtype == PSTATE_FP8_E4M3 || p->dtype == PSTATE_FP8_E5M2)) {
    if (below(rng, 10) == 0) p->expect_unsupported = 1;
    else p->dtype = PSTATE_FLOAT32;
  }
  int size = group_sizes[p->group];
  p->root = (int)below(rng, (uint64_t)size);
  /* log-uniform bytes in [1, 1 MiB] for the largest buffer, 3% exactly 0 */
  size_t es = pstate_dtype_size(p->dtype), largest = (size_t)1 << below(rng, 21);
  largest += (size_t)below(rng, largest);
  if (largest > MAX_BYTES) largest = MAX_BYTES;
  p->count = below(rng, 100) < 3 ? 0 : largest / es / blocks_of(p->op, size);
}

/* ---- inputs and references --------------------------------------------------------------------- */

typedef struct soak_t {
  uint64_t seed;
  long ops;
  int rank;
  pstate_t *ps;
  pstate_group_t *groups[G_COUNT];
  int ranks[G_COUNT][SOAK_RANKS];
  int sizes[G_COUNT];
  int me[G_COUNT]; /* rank in group */
  unsigned char *a, *b, *c; /* scratch buffers: send, receive, expected */
  long done[OP_COUNT];
} soak_t;

/* A reduction input that keeps every result exact (see the file comment). Returned as a signed
 * or unsigned 64-bit integer for integer dtypes (*as_int), else as a double. */
static void reduce_input(pstate_dtype_t d, pstate_reduce_op_t op, uint64_t h, int64_t *as_int, uint64_t *as_uint,
                         double *as_float) {
  int sign = (h >> 63) ? -1 : 1;
  if (op == PSTATE_PROD) {
    int mag = (h & 1) ? 2 : 1;
    int s = pstate_test_is_signed(d) || pstate_test_is_float(d) ? sign : 1;
    *as_int = s * mag;
    *as_uint = (uint64_t)mag;
    *as_float = s * mag;
    return;
  }
  switch (d) {
    case PSTATE_INT8: *as_int = (int64_t)(h % 63) - 31; break;
    case PSTATE_UINT8: *as_uint = h % 64; break;
    case PSTATE_INT32: *as_int = (int64_t)(h % (1ull << 30)) - (1ll << 29); break;
    case PSTATE_UINT32: *as_uint = h % (1ull << 30); break;
    case PSTATE_INT64: *as_int = (int64_t)(h % (1ull << 61)) - (1ll << 60); break;
    case PSTATE_UINT64: *as_uint = h % (1ull << 61); break;
    case PSTATE_FLOAT32: *as_float = ldexp((double)((int64_t)(h % 2049) - 1024), (int)((h >> 32) % 9) - 4); break;
    case PSTATE_FLOAT64:
      *as_float = ldexp((double)((int64_t)(h % (1ull << 30)) - (1ll << 29)), (int)((h >> 40) % 21) - 10);
      break;
    case PSTATE_FLOAT16: *as_float = ldexp((double)((int64_t)(h % 129) - 64), (int)((h >> 32) % 3) - 1); break;
    case PSTATE_BFLOAT16: *as_float = ldexp((double)((int64_t)(h % 31) - 15), (int)((h >> 32) % 3) - 1); break;
    default: *as_uint = h & 0xff; break;
  }
}

static uint64_t element_hash(const soak_t *s, const plan_t *p, int global_rank, size_t i) {
  return hash4(s->seed, (uint64_t)p->index, (uint64_t)global_rank, i);
}

/* Writes element i of global_rank's reduction input into buf[i]. */
static void store_reduce_input(const soak_t *s, const plan_t *p, int global_rank, void *buf, size_t i) {
  int64_t vi = 0;
  uint64_t vu = 0;
  double vf = 0;
  reduce_input(p->dtype, p->rop, element_hash(s, p, global_rank, i), &vi, &vu, &vf);
  switch (p->dtype) {
    case PSTATE_INT8: ((int8_t *)buf)[i] = (int8_t)vi; break;
    case PSTATE_INT32: ((int32_t *)buf)[i] = (int32_t)vi; break;
    case PSTATE_INT64: ((int64_t *)buf)[i] = vi; break;
    case PSTATE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)vu; break;
    case PSTATE_UINT32: ((uint32_t *)buf)[i] = (uint32_t)vu; break;
    case PSTATE_UINT64: ((uint64_t *)buf)[i] = vu; break;
    default: pstate_test_store(p->dtype, buf, i, vf); break;
  }
}

/* The exact reduction of element i over the group's ranks, written into out[i]. */
static void store_reduced(const soak_t *s, const plan_t *p, const int *ranks, int n, void *out, size_t i) {
  int64_t ai = 0, vi = 0;
  uint64_t au = 0, vu = 0;
  double af = 0, vf = 0;
  for (int k = 0; k < n; ++k) {
    reduce_input(p->dtype, p->rop, element_hash(s, p, ranks[k], i), &vi, &vu, &vf);
    if (k == 0) {
      ai = vi, au = vu, af = vf;
      continue;
    }
    switch (p->rop) {
      case PSTATE_SUM: case PSTATE_AVG: ai += vi, au += vu, af += vf; break;
      case PSTATE_PROD: ai *= vi, au *= vu, af *= vf; break;
      case PSTATE_MAX: ai = vi > ai ? vi : ai, au = vu > au ? vu : au, af = vf > af ? vf : af; break;
      case PSTATE_MIN: ai = vi < ai ? vi : ai, au = vu < au ? vu : au, af = vf < af ? vf : af; break;
    }
  }
  if (p->rop == PSTATE_AVG) ai /= n, au /= (uint64_t)n, af /= n; /* C truncates toward zero */
  switch (p->dtype) {
    case PSTATE_INT8: ((int8_t *)out)[i] = (int8_t)ai; break;
    case PSTATE_INT32: ((int32_t *)out)[i] = (int32_t)ai; break;
    case PSTATE_INT64: ((int64_t *)out)[i] = ai; break;
    case PSTATE_UINT8: ((uint8_t *)out)[i] = (uint8_t)au; break;
    case PSTATE_UINT32: ((uint32_t *)out)[i] = (uint32_t)au; break;
    case PSTATE_UINT64: ((uint64_t *)out)[i] = au; break;
    default: pstate_test_store(p->dtype, out, i, af); break;
  }
}

/* Raw bytes for data moves: byte j of global_rank's block `block` (block -1: a whole buffer). */
static void fill_bytes(const soak_t *s, const plan_t *p, int global_rank, int block, unsigned char *buf, size_t n) {
  uint64_t base = hash4(s->seed, (uint64_t)p->index, (uint64_t)global_rank, (uint64_t)(block + 1));
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    uint64_t v = mix(base + j);
    memcpy(buf + j, &v, 8);
  }
  if (j < n) {
    uint64_t v = mix(base + j);
    memcpy(buf + j, &v, n - j);
  }
}

/* ---- running one operation ------------------------------------------------------------------- */

static int mismatch(const soak_t *s, const plan_t *p, const void *got, const void *want, size_t bytes) {
  size_t at = 0;
  while (at < bytes && ((const unsigned char *)got)[at] == ((const unsigned char *)want)[at]) ++at;
  fprintf(stderr,
          "rank %d: soak op #%ld %s on %s (%s %s, count %zu, root %d, seed %llu): byte %zu of %zu differs "
          "(got 0x%02x, expected 0x%02x)\n",
          s->rank, p->index, kOpNames[p->op], pstate_group_kind_name(kGroupKinds[p->group]),
          pstate_dtype_name(p->dtype), pstate_reduce_op_name(p->rop), p->count, p->root,
          (unsigned long long)s->seed, at, bytes, ((const unsigned char *)got)[at], ((const unsigned char *)want)[at]);
  return 1;
}

#define SOAK_OK(s, p, call)                                                                             \
  do {                                                                                                  \
    pstate_status_t soak_st_ = (call);                                                                  \
    if (soak_st_ != PSTATE_OK) {                                                                        \
      fprintf(stderr, "rank %d: soak op #%ld %s on %s: %s: %s\n", (s)->rank, (p)->index, kOpNames[(p)->op], \
              pstate_group_kind_name(kGroupKinds[(p)->group]), pstate_status_string(soak_st_),          \
              pstate_last_error());                                                                     \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)

static int run_reduction(soak_t *s, const plan_t *p) {
  pstate_group_t *g = s->groups[p->group];
  int n = s->sizes[p->group], me = s->me[p->group];
  const int *ranks = s->ranks[p->group];
  size_t es = pstate_dtype_size(p->dtype), total = p->count * (p->op == OP_REDUCE_SCATTER ? (size_t)n : 1);
  for (size_t i = 0; i < total; ++i) store_reduce_input(s, p, s->rank, s->a, i);
  if (p->expect_unsupported) {
    pstate_status_t st = p->op == OP_ALL_REDUCE ? pstate_all_reduce(g, s->a, s->b, p->count, p->dtype, p->rop, NULL)
                         : p->op == OP_REDUCE
                             ? pstate_reduce(g, s->a, s->b, p->count, p->dtype, p->rop, p->root, NULL)
                             : pstate_reduce_scatter(g, s->a, s->b, p->count, p->dtype, p->rop, NULL);
    if (st == PSTATE_ERR_UNSUPPORTED) return 0;
    fprintf(stderr, "rank %d: soak op #%ld: %s of %s gave %s, expected PSTATE_ERR_UNSUPPORTED\n", s->rank, p->index,
            kOpNames[p->op], pstate_dtype_name(p->dtype), pstate_status_string(st));
    return 1;
  }
  if (p->op == OP_ALL_REDUCE) {
    int in_place = (int)(p->index & 1);
    SOAK_OK(s, p, pstate_all_reduce(g, s->a, in_place ? s->a : s->b, p->count, p->dtype, p->rop, NULL));
    if (in_place) memcpy(s->b, s->a, p->count * es);
    for (size_t i = 0; i < p->count; ++i) store_reduced(s, p, ranks, n, s->c, i);
    return memcmp(s->b, s->c, p->count * es) ? mismatch(s, p, s->b, s->c, p->count * es) : 0;
  }
  if (p->op == OP_REDUCE) { /* recv on the root only (in place every other time), NULL elsewhere */
    int in_place = (int)(p->index & 1);
    void *recv = me != p->root ? NULL : in_place ? s->a : s->b;
    SOAK_OK(s, p, pstate_reduce(g, s->a, recv, p->count, p->dtype, p->rop, p->root, NULL));
    if (me != p->root) return 0;
    if (in_place) memcpy(s->b, s->a, p->count * es);
    for (size_t i = 0; i < p->count; ++i) store_reduced(s, p, ranks, n, s->c, i);
    return memcmp(s->b, s->c, p->count * es) ? mismatch(s, p, s->b, s->c, p->count * es) : 0;
  }
  SOAK_OK(s, p, pstate_reduce_scatter(g, s->a, s->b, p->count, p->dtype, p->rop, NULL));
  for (size_t i = 0; i < p->count; ++i) store_reduced(s, p, ranks, n, s->c, (size_t)me * p->count + i);
  return memcmp(s->b, s->c + (size_t)me * p->count * es, p->count * es)
             ? mismatch(s, p, s->b, s->c + (size_t)me * p->count * es, p->count * es)
             : 0;
}

static int run_move(soak_t *s, const plan_t *p) {
  pstate_group_t *g = s->groups[p->group];
  int n = s->sizes[p->group], me = s->me[p->group];
  const int *ranks = s->ranks[p->group];
  size_t bytes = p->count * pstate_dtype_size(p->dtype);
  switch (p->op) {
    case OP_ALL_GATHER:
    case OP_GATHER: {
      fill_bytes(s, p, s->rank, -1, s->a, bytes);
      if (p->op == OP_ALL_GATHER) SOAK_OK(s, p, pstate_all_gather(g, s->a, s->b, p->count, p->dtype, NULL));
      else SOAK_OK(s, p, pstate_gather(g, s->a, me == p->root ? s->b : NULL, p->count, p->dtype, p->root, NULL));
      if (p->op == OP_GATHER && me != p->root) return 0;
      for (int r = 0; r < n; ++r) fill_bytes(s, p, ranks[r], -1, s->c + (size_t)r * bytes, bytes);
      return memcmp(s->b, s->c, bytes * (size_t)n) ? mismatch(s, p, s->b, s->c, bytes * (size_t)n) : 0;
    }
    case OP_BROADCAST:
      if (me == p->root) fill_bytes(s, p, s->rank, -1, s->a, bytes);
      else memset(s->a, 0xa5, bytes);
      SOAK_OK(s, p, pstate_broadcast(g, s->a, p->count, p->dtype, p->root, NULL));
      fill_bytes(s, p, ranks[p->root], -1, s->c, bytes);
      return memcmp(s->a, s->c, bytes) ? mismatch(s, p, s->a, s->c, bytes) : 0;
    case OP_ALL_TO_ALL:
      for (int j = 0; j < n; ++j) fill_bytes(s, p, s->rank, j, s->a + (size_t)j * bytes, bytes);
      SOAK_OK(s, p, pstate_all_to_all(g, s->a, s->b, p->count, p->dtype, NULL));
      for (int r = 0; r < n; ++r) fill_bytes(s, p, ranks[r], me, s->c + (size_t)r * bytes, bytes);
      return memcmp(s->b, s->c, bytes * (size_t)n) ? mismatch(s, p, s->b, s->c, bytes * (size_t)n) : 0;
    case OP_SCATTER: /* block j of the root's send goes to group rank j; send NULL elsewhere */
      if (me == p->root)
        for (int j = 0; j < n; ++j) fill_bytes(s, p, s->rank, j, s->a + (size_t)j * bytes, bytes);
      SOAK_OK(s, p, pstate_scatter(g, me == p->root ? s->a : NULL, s->b, p->count, p->dtype, p->root, NULL));
      fill_bytes(s, p, ranks[p->root], me, s->c, bytes);
      return memcmp(s->b, s->c, bytes) ? mismatch(s, p, s->b, s->c, bytes) : 0;
    case OP_SEND_RECV: { /* pairs (0,1), (2,3): the even one sends first */
      int partner = me ^ 1;
      if (partner >= n) return 0;
      fill_bytes(s, p, s->rank, -1, s->a, bytes);
      if ((me & 1) == 0) {
        SOAK_OK(s, p, pstate_send(g, s->a, p->count, p->dtype, partner, NULL));
        SOAK_OK(s, p, pstate_recv(g, s->b, p->count, p->dtype, partner, NULL));
      } else {
        SOAK_OK(s, p, pstate_recv(g, s->b, p->count, p->dtype, partner, NULL));
        SOAK_OK(s, p, pstate_send(g, s->a, p->count, p->dtype, partner, NULL));
      }
      fill_bytes(s, p, ranks[partner], -1, s->c, bytes);
      return memcmp(s->b, s->c, bytes) ? mismatch(s, p, s->b, s->c, bytes) : 0;
    }
    default:
      return 1;
  }
}

static int run_object(soak_t *s, const plan_t *p) {
  pstate_group_t *g = s->groups[p->group];
  int n = s->sizes[p->group], me = s->me[p->group];
  const int *ranks = s->ranks[p->group];
  pstate_bytes_t out = {NULL, 0};
  if (p->op == OP_BROADCAST_OBJECT) {
    size_t bytes = p->count % (64 * 1024 + 1);
    fill_bytes(s, p, ranks[p->root], -1, s->c, bytes);
    SOAK_OK(s, p, pstate_broadcast_object(g, s->c, me == p->root ? bytes : 0, p->root, &out));
    int bad = out.size != bytes || (bytes > 0 && memcmp(out.data, s->c, bytes) != 0);
    pstate_bytes_free(&out);
    return bad ? mismatch(s, p, "\x00", "\x01", 1) : 0;
  }
  size_t sizes[SOAK_RANKS], want_total = 0;
  size_t mine = (size_t)(hash4(s->seed, (uint64_t)p->index, (uint64_t)s->rank, 7) % (16 * 1024 + 1));
  fill_bytes(s, p, s->rank, -1, s->a, mine);
  SOAK_OK(s, p, pstate_all_gather_object(g, s->a, mine, &out, sizes, SOAK_RANKS, &(size_t){0}));
  int bad = 0;
  for (int r = 0; r < n && !bad; ++r) {
    size_t want = (size_t)(hash4(s->seed, (uint64_t)p->index, (uint64_t)ranks[r], 7) % (16 * 1024 + 1));
    fill_bytes(s, p, ranks[r], -1, s->c, want);
    bad = sizes[r] != want || want_total + want > out.size ||
          (want > 0 && memcmp((unsigned char *)out.data + want_total, s->c, want) != 0);
    want_total += want;
  }
  bad = bad || want_total != out.size;
  pstate_bytes_free(&out);
  return bad ? mismatch(s, p, "\x00", "\x01", 1) : 0;
}

static int run_plan(soak_t *s, const plan_t *p) {
  s->done[p->op]++;
  switch (p->op) {
    case OP_ALL_REDUCE:
    case OP_REDUCE:
    case OP_REDUCE_SCATTER: return run_reduction(s, p);
    case OP_BARRIER: SOAK_OK(s, p, pstate_barrier(s->groups[p->group])); return 0;
    case OP_BROADCAST_OBJECT:
    case OP_ALL_GATHER_OBJECT: return run_object(s, p);
    default: return run_move(s, p);
  }
}

/* ---- the rank -------------------------------------------------------------------------------- */

static long env_long(const char *name, long fallback) {
  const char *v = getenv(name);
  return v != NULL && *v ? atol(v) : fallback;
}

static int soak_rank(const pstate_test_rank_t *self) {
  soak_t s;
  memset(&s, 0, sizeof s);
  s.seed = (uint64_t)env_long("PSTATE_SOAK_SEED", 20240601);
  s.ops = *(const long *)self->arg;
  s.rank = self->rank;
  RANK_OK(self, pstate_test_init(self, 120000, &s.ps));
  pstate_parallel_config_t cfg = PSTATE_PARALLEL_CONFIG_INIT;
  cfg.tensor_parallel_size = 2;
  cfg.pipeline_parallel_size = 2;
  RANK_OK(self, pstate_initialize_model_parallel(s.ps, &cfg));
  for (int k = 0; k < G_COUNT; ++k) {
    RANK_OK(self, pstate_get_group(s.ps, kGroupKinds[k], &s.groups[k]));
    size_t n = 0;
    RANK_OK(self, pstate_group_ranks(s.groups[k], s.ranks[k], SOAK_RANKS, &n));
    s.sizes[k] = (int)n;
    pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
    RANK_OK(self, pstate_group_info(s.groups[k], &info));
    s.me[k] = info.rank_in_group;
  }
  s.a = malloc(2 * MAX_BYTES + 64);
  s.b = malloc(2 * MAX_BYTES + 64);
  s.c = malloc(2 * MAX_BYTES + 64);
  rng_t rng = {mix(s.seed ^ 0x5eed5eed5eed5eedull)}; /* neighbouring seeds: unrelated streams */
  double t0 = pstate_test_now_ms();
  int failed = 0;
  for (long i = 0; i < s.ops && !failed; ++i) {
    plan_t p;
    draw(&rng, i, s.sizes, &p);
    failed = run_plan(&s, &p);
    if (self->rank == 0 && s.ops >= 10000 && (i + 1) % (s.ops / 10) == 0)
      fprintf(stderr, "soak: %ld of %ld operations in %.0f s\n", i + 1, s.ops, (pstate_test_now_ms() - t0) / 1e3);
  }
  if (!failed && self->rank == 0) {
    fprintf(stderr, "soak: %ld operations bit-exact in %.1f s (seed %llu):", s.ops, (pstate_test_now_ms() - t0) / 1e3,
            (unsigned long long)s.seed);
    for (int k = 0; k < OP_COUNT; ++k) fprintf(stderr, " %s %ld", kOpNames[k], s.done[k]);
    fprintf(stderr, "\n");
  }
  free(s.a);
  free(s.b);
  free(s.c);
  if (failed) {
    pstate_abort(s.ps);
    return 1;
  }
  RANK_OK(self, pstate_finalize(s.ps));
  return 0;
}

static void test_soak_mixed_collectives_on_4_processes_are_bit_exact(void **state) {
  (void)state;
  long ops = env_long("PSTATE_SOAK_OPS", 2000);
  int timeout_s = (int)(120 + ops / 20);
  assert_int_equal(pstate_test_run_processes(SOAK_RANKS, timeout_s, soak_rank, &ops, NULL), 0);
}

static void test_soak_mixed_collectives_on_4_threads_are_bit_exact(void **state) {
  (void)state;
  long ops = env_long("PSTATE_SOAK_THREAD_OPS", 300);
  assert_int_equal(pstate_test_run_threads(SOAK_RANKS, (int)(120 + ops / 20), soak_rank, &ops), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_soak_mixed_collectives_on_4_processes_are_bit_exact),
      cmocka_unit_test(test_soak_mixed_collectives_on_4_threads_are_bit_exact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
