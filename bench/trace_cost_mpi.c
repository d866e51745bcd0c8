/*
 * trace_cost_mpi.c — Open MPI's side of bench/trace_cost.sh: the same back-to-back loop as
 * bench/agreement_loop.c (CALLS untimed calls, then BATCHES timed batches of CALLS, rank 0 prints
 * the median batch's time per call as "ns_per_call N"), over MPI_Allreduce of float32 sum, so the
 * flight recorder's cost is read beside what the benchmark peer takes for the same call.
 *
 *   mpirun -n 2 --bind-to core trace_cost_mpi BYTES [CALLS] [BATCHES]
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int count = argc > 1 ? atoi(argv[1]) / (int)sizeof(float) : 2;
  long calls = argc > 2 ? atol(argv[2]) : 100000, batches = argc > 3 ? atol(argv[3]) : 9;
  if (count < 1) count = 1;
  float *send = malloc(sizeof(float) * (size_t)count), *recv = malloc(sizeof(float) * (size_t)count);
  for (int i = 0; i < count; ++i) send[i] = 1.0f;
  double *t = malloc(sizeof(double) * (size_t)batches);
  for (long i = 0; i < calls; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (long b = 0; b < batches; ++b) {
    double t0 = now_ns();
    for (long i = 0; i < calls; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t[b] = (now_ns() - t0) / (double)calls;
  }
  qsort(t, (size_t)batches, sizeof(double), cmp);
  int bad = recv[0] != (float)size;
  if (rank == 0 && !bad) printf("ns_per_call %.2f\n", t[batches / 2]);
  free(send);
  free(recv);
  free(t);
  MPI_Finalize();
  return bad;
}
