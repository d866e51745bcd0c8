/*
 * mpi_bench.c — the Open MPI twin of `pstate bench`: the same operations, sizes, iterations,
 * timing rule, --check inputs, table and JSON (all from src/cli/bench_common.h), measured over
 * MPI_COMM_WORLD, so bench/run.sh can put the two side by side.
 *
 *   mpirun -np N mpi_bench [--op OP] [--dtype T] [--redop sum|max|min] [-b 8] [-e 64M] [-f 2]
 *                          [--iters N] [--warmup N] [--check] [--json FILE]
 *
 * The MPI calls per op: all_reduce MPI_Allreduce, all_gather MPI_Allgather, reduce_scatter
 * MPI_Reduce_scatter_block, broadcast MPI_Bcast, all_to_all MPI_Alltoall, send_recv a
 * MPI_Send/MPI_Recv ping-pong between ranks 2k and 2k+1 (half the round trip is reported),
 * broadcast_object MPI_Bcast of the bytes (the size known in advance, which favours MPI),
 * all_gatherv MPI_Allgatherv (the same uneven parts), sendrecv MPI_Irecv + MPI_Isend around the
 * ring and MPI_Waitall, and
 * startup only MPI_Init + MPI_Barrier + MPI_Finalize (timed from outside, whole process). All out of place
 * except broadcast. Element types without an MPI type (float16, bfloat16, fp8) move as bytes
 * and cannot be reduced. With --check, any wrong result makes rank 0 exit 1.
 *
 * Build: mpicc -O2 -I src/cli bench/mpi_bench.c -o mpi_bench (bench/run.sh does it).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, posix_memalign under -std=c99 */

#include "bench_common.h"

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct options_t {
  bench_op_t op;
  int dtype, redop;
  size_t min_bytes, max_bytes, factor;
  int iters, warmup; /* 0 = default for the size */
  int check;
  const char *json;
} options_t;

static void usage_exit(int rank, const char *why) {
  if (rank == 0)
    fprintf(stderr,
            "mpi_bench: %s\nusage: mpi_bench [--op OP] [--dtype T] [--redop sum|max|min] [-b 8] [-e 64M] [-f 2]\n"
            "                 [--iters N] [--warmup N] [--check] [--json FILE]\n",
            why);
  MPI_Finalize();
  exit(2);
}

static size_t size_arg(int rank, const char *name, const char *text) {
  size_t v;
  if (bench_parse_size(text, &v) != 0 || v == 0) {
    char why[128];
    snprintf(why, sizeof why, "%s expects a size like 8, 64K, 16M; got '%s'", name, text);
    usage_exit(rank, why);
  }
  return v;
}

static options_t parse_options(int argc, char **argv, int rank) {
  options_t o = {BENCH_ALL_REDUCE, BENCH_FLOAT32, BENCH_SUM, 8, (size_t)64 << 20, 2, 0, 0, 0, NULL};
  int i;
  for (i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = 1;
    if (strcmp(a, "--check") == 0) {
      o.check = 1;
      takes = 0;
    } else if (v == NULL) {
      usage_exit(rank, "an option is missing its value");
    } else if (strcmp(a, "--op") == 0) {
      int op = bench_op_from_name(v);
      if (op < 0) usage_exit(rank, "unknown --op");
      o.op = (bench_op_t)op;
    } else if (strcmp(a, "--dtype") == 0) {
      if ((o.dtype = bench_dtype_from_name(v)) < 0) usage_exit(rank, "unknown --dtype");
    } else if (strcmp(a, "--redop") == 0) {
      if ((o.redop = bench_redop_from_name(v)) < 0) usage_exit(rank, "unknown --redop (sum, max, min)");
    } else if (strcmp(a, "-b") == 0) {
      o.min_bytes = size_arg(rank, a, v);
    } else if (strcmp(a, "-e") == 0) {
      o.max_bytes = size_arg(rank, a, v);
    } else if (strcmp(a, "-f") == 0) {
      o.factor = (size_t)atoi(v);
      if (o.factor < 2) usage_exit(rank, "-f must be >= 2");
    } else if (strcmp(a, "--iters") == 0) {
      o.iters = atoi(v);
    } else if (strcmp(a, "--warmup") == 0) {
      o.warmup = atoi(v);
    } else if (strcmp(a, "--json") == 0) {
      o.json = v;
    } else {
      usage_exit(rank, "unknown option");
    }
    i += takes;
  }
  if (o.max_bytes < o.min_bytes) usage_exit(rank, "-e must be >= -b");
  return o;
}

static MPI_Datatype mpi_type(int dtype) {
  switch (dtype) {
    case BENCH_INT8:
      return MPI_INT8_T;
    case BENCH_UINT8:
      return MPI_UINT8_T;
    case BENCH_INT32:
      return MPI_INT32_T;
    case BENCH_UINT32:
      return MPI_UINT32_T;
    case BENCH_INT64:
      return MPI_INT64_T;
    case BENCH_UINT64:
      return MPI_UINT64_T;
    case BENCH_FLOAT32:
      return MPI_FLOAT;
    case BENCH_FLOAT64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(int redop) {
  return redop == BENCH_MAX ? MPI_MAX : redop == BENCH_MIN ? MPI_MIN : MPI_SUM;
}

/* One size: buffers, the crafted inputs, and the call. */
typedef struct sized_t {
  const options_t *o;
  int rank, n;
  size_t count, elem;
  MPI_Datatype type; /* the element type, or MPI_BYTE with count scaled */
  int type_count;    /* count in units of type */
  unsigned char *send, *recv;
  size_t send_bytes, recv_bytes;
  int *counts, *displs; /* all_gatherv: every rank's part and its place, in units of type */
} sized_t;

static void *alloc_or_die(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes > 0 ? bytes : 1) != 0) {
    fprintf(stderr, "mpi_bench: cannot allocate %zu bytes\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return p;
}

static void setup(sized_t *s) {
  const options_t *o = s->o;
  size_t block = s->count * s->elem;
  s->type = mpi_type(o->dtype);
  s->type_count = (int)s->count;
  if (s->type == MPI_DATATYPE_NULL) {
    if (bench_op_reduces(o->op)) {
      if (s->rank == 0) fprintf(stderr, "mpi_bench: MPI has no reduction for %s\n", bench_dtype_name(o->dtype));
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    s->type = MPI_BYTE;
    s->type_count = (int)block;
  }
  switch (o->op) {
    case BENCH_ALL_GATHER:
      s->send_bytes = block, s->recv_bytes = block * (size_t)s->n;
      break;
    case BENCH_REDUCE_SCATTER:
      s->send_bytes = block * (size_t)s->n, s->recv_bytes = block;
      break;
    case BENCH_ALL_TO_ALL:
      s->send_bytes = s->recv_bytes = block * (size_t)s->n;
      break;
    case BENCH_ALL_GATHERV: {
      int j;
      s->counts = (int *)alloc_or_die(sizeof(int) * (size_t)s->n);
      s->displs = (int *)alloc_or_die(sizeof(int) * (size_t)s->n);
      for (j = 0; j < s->n; ++j) {
        s->counts[j] = s->type_count * (int)bench_gatherv_weight(j);
        s->displs[j] = s->type_count * (int)(bench_gatherv_offset(j, s->count) / s->count);
      }
      s->send_bytes = block * bench_gatherv_weight(s->rank), s->recv_bytes = block * bench_gatherv_weights(s->n);
      break;
    }
    default:
      s->send_bytes = s->recv_bytes = block;
      break;
  }
  s->send = (unsigned char *)alloc_or_die(s->send_bytes);
  s->recv = (unsigned char *)alloc_or_die(s->recv_bytes);
  memset(s->recv, 0xee, s->recv_bytes);
  if (bench_op_reduces(o->op)) {
    bench_fill_values(s->send, s->send_bytes / s->elem, o->dtype, s->rank, 0);
  } else if (o->op == BENCH_ALL_TO_ALL) { /* block j goes to rank j: its bytes say so */
    size_t j;
    for (j = 0; j < (size_t)s->n; ++j) bench_fill_pattern(s->send + j * block, block, s->rank, j * block);
  } else if (o->op == BENCH_BROADCAST || o->op == BENCH_BROADCAST_OBJECT) {
    if (s->rank == 0) bench_fill_pattern(s->recv, block, 0, 0); /* in place: the root's buffer */
  } else if (o->op == BENCH_ALL_GATHERV) {
    bench_fill_pattern(s->send, s->send_bytes, s->rank, 0);
  } else {
    bench_fill_pattern(s->send, block, s->rank, 0);
  }
}

static void run_once(sized_t *s) {
  const options_t *o = s->o;
  MPI_Comm w = MPI_COMM_WORLD;
  int peer = s->rank ^ 1;
  switch (o->op) {
    case BENCH_ALL_REDUCE:
      MPI_Allreduce(s->send, s->recv, s->type_count, s->type, mpi_op(o->redop), w);
      break;
    case BENCH_ALL_GATHER:
      MPI_Allgather(s->send, s->type_count, s->type, s->recv, s->type_count, s->type, w);
      break;
    case BENCH_REDUCE_SCATTER:
      MPI_Reduce_scatter_block(s->send, s->recv, s->type_count, s->type, mpi_op(o->redop), w);
      break;
    case BENCH_BROADCAST:
    case BENCH_BROADCAST_OBJECT:
      MPI_Bcast(s->recv, s->type_count, s->type, 0, w);
      break;
    case BENCH_ALL_TO_ALL:
      MPI_Alltoall(s->send, s->type_count, s->type, s->recv, s->type_count, s->type, w);
      break;
    case BENCH_SEND_RECV:
      if (peer >= s->n) break; /* odd world: the last rank sits out */
      if (s->rank % 2 == 0) {
        MPI_Send(s->send, s->type_count, s->type, peer, 0, w);
        MPI_Recv(s->recv, s->type_count, s->type, peer, 0, w, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(s->recv, s->type_count, s->type, peer, 0, w, MPI_STATUS_IGNORE);
        MPI_Send(s->send, s->type_count, s->type, peer, 0, w);
      }
      break;
    case BENCH_ALL_GATHERV:
      MPI_Allgatherv(s->send, s->counts[s->rank], s->type, s->recv, s->counts, s->displs, s->type, w);
      break;
    case BENCH_SENDRECV_RING: {
      MPI_Request r[2];
      MPI_Irecv(s->recv, s->type_count, s->type, (s->rank + s->n - 1) % s->n, 0, w, &r[0]);
      MPI_Isend(s->send, s->type_count, s->type, (s->rank + 1) % s->n, 0, w, &r[1]);
      MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
      break;
    }
    default:
      break;
  }
}

/* Wrong elements (reductions) or bytes (moves) in this rank's output of the last run. */
static long count_wrong(const sized_t *s) {
  const options_t *o = s->o;
  size_t block = s->count * s->elem, j, wrong = 0;
  switch (o->op) {
    case BENCH_ALL_REDUCE:
      return (long)bench_count_reduce_wrong(s->recv, s->count, o->dtype, o->redop, s->n, 0);
    case BENCH_REDUCE_SCATTER:
      return (long)bench_count_reduce_wrong(s->recv, s->count, o->dtype, o->redop, s->n, (size_t)s->rank * s->count);
    case BENCH_ALL_GATHER:
      for (j = 0; j < (size_t)s->n; ++j) wrong += bench_count_pattern_wrong(s->recv + j * block, block, (int)j, 0);
      return (long)wrong;
    case BENCH_ALL_TO_ALL: /* block j came from rank j, cut at this rank's offset */
      for (j = 0; j < (size_t)s->n; ++j)
        wrong += bench_count_pattern_wrong(s->recv + j * block, block, (int)j, (size_t)s->rank * block);
      return (long)wrong;
    case BENCH_BROADCAST:
    case BENCH_BROADCAST_OBJECT:
      return (long)bench_count_pattern_wrong(s->recv, block, 0, 0);
    case BENCH_SEND_RECV:
      return (s->rank ^ 1) < s->n ? (long)bench_count_pattern_wrong(s->recv, block, s->rank ^ 1, 0) : 0;
    case BENCH_ALL_GATHERV:
      for (j = 0; j < (size_t)s->n; ++j)
        wrong += bench_count_pattern_wrong(s->recv + bench_gatherv_offset((int)j, s->count) * s->elem,
                                           block * bench_gatherv_weight((int)j), (int)j, 0);
      return (long)wrong;
    case BENCH_SENDRECV_RING:
      return (long)bench_count_pattern_wrong(s->recv, block, (s->rank + s->n - 1) % s->n, 0);
    default:
      return 0;
  }
}

/* Times one size; returns rank 0's row (valid on every rank). */
static bench_result_t bench_size(const options_t *o, size_t bytes, int rank, int n) {
  sized_t s;
  int iters, warmup, it;
  double *times, time_us;
  long wrong = 0, total_wrong = 0;
  memset(&s, 0, sizeof s);
  s.o = o, s.rank = rank, s.n = n, s.elem = bench_dtype_size(o->dtype);
  s.count = bench_count_for(o->op, bytes, s.elem, n);
  bytes = bench_bytes_for(o->op, s.count, s.elem, n);
  setup(&s);
  iters = o->iters > 0 ? o->iters : bench_default_iters(bytes);
  warmup = o->warmup > 0 ? o->warmup : bench_default_warmup(iters);
  times = (double *)alloc_or_die(sizeof(double) * (size_t)iters);
  for (it = 0; it < warmup + iters; ++it) {
    double t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = bench_now_us();
    run_once(&s);
    if (it >= warmup) times[it - warmup] = bench_now_us() - t0;
  }
  MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  time_us = bench_median(times, (size_t)iters);
  if (o->op == BENCH_SEND_RECV) time_us /= 2; /* one way */
  if (o->check) wrong = count_wrong(&s);
  MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  free(times);
  free(s.send);
  free(s.recv);
  free(s.counts);
  free(s.displs);
  return bench_make_result(o->op, bytes, s.count, n, time_us, total_wrong);
}

int main(int argc, char **argv) {
  int rank, n;
  options_t o;
  bench_result_t *results = NULL;
  size_t nresults = 0, cap = 0, bytes;
  long total_wrong = 0;
  double start;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  o = parse_options(argc, argv, rank);
  if (o.op == BENCH_STARTUP) { /* the whole point: MPI_Init + a barrier (pstate_init ends with one) + MPI_Finalize */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
  }
  if ((o.op == BENCH_SEND_RECV || o.op == BENCH_SENDRECV_RING) && n < 2)
    usage_exit(rank, "send_recv and sendrecv need at least 2 ranks");
  if (rank == 0)
    bench_print_header(stdout, "mpi_bench (Open MPI)", o.op, bench_dtype_name(o.dtype),
                       o.redop == BENCH_SUM   ? "sum"
                       : o.redop == BENCH_MAX ? "max"
                                              : "min",
                       n, o.check);
  start = bench_now_us();
  for (bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
    bench_result_t r = bench_size(&o, bytes, rank, n);
    if (rank == 0) {
      double elapsed_s = (bench_now_us() - start) / 1e6;
      if (nresults == cap) {
        cap = cap ? 2 * cap : 32;
        results = (bench_result_t *)realloc(results, cap * sizeof *results);
        if (results == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
      }
      results[nresults++] = r;
      bench_print_row(stdout, &r, o.check);
      if (elapsed_s > 2.0)
        fprintf(stderr, "# progress: %s %zu B done, %.1f s\n", bench_op_name(o.op), r.bytes, elapsed_s);
    }
    if (bytes > ((size_t)-1) / o.factor) break;
  }
  if (rank == 0 && o.json != NULL &&
      bench_write_json(o.json, o.op, bench_dtype_name(o.dtype), n, results, nresults) != 0) {
    fprintf(stderr, "mpi_bench: cannot write %s\n", o.json);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (bytes = 0; bytes < nresults; ++bytes) total_wrong += results[bytes].wrong;
  if (rank == 0 && total_wrong != 0) fprintf(stderr, "mpi_bench: --check found %ld wrong results\n", total_wrong);
  free(results);
  MPI_Finalize();
  return total_wrong != 0; /* rank 0 holds the results; the others return 0 */
}
