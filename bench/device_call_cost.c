/*
 * device_call_cost.c — pstate's own host time per eager device call, for bench/device_call_cost.sh.
 *
 *   pstate run -n N -- device_call_cost [ROUNDS] [SAMPLES] [CALLS_PER_SAMPLE]
 *
 * Method. A CUDA context (device = PSTATE_DEVICE_CUDA) times pstate_all_reduce (float32 sum, out of
 * place, on a non-blocking stream of its own) against a direct call of the same NCCL entry point,
 * ncclAllReduce, resolved from the very library pstate loaded (PSTATE_NCCL_LIBRARY, else
 * libnccl.so.2; the CUDA runtime likewise from PSTATE_CUDA_RUNTIME_LIBRARY, else libcudart.so.13),
 * on a communicator of the same ranks made here (its unique id sent with pstate_broadcast_object),
 * with the same buffers (cudaMalloc) and stream. Loaded with the no-work stand-ins of tests/devsim
 * (nowork/: collectives and cudaMemcpyAsync return at once), the direct call costs almost nothing
 * and pstate's call is pstate's own host work: argument and handle checks, the pointer checks
 * (cudaPointerGetAttributes), the current device, the stream, the flight recorder, plus whatever
 * the stand-in's pointer query costs. The difference pstate - direct is what the tables report.
 * At world 1 pstate enqueues a device copy (a group of one has no NCCL communicator) where the
 * direct side calls ncclAllReduce on a communicator of one: both return at once here.
 *
 * Sizes: 8 B, 1 MiB, 256 MiB (one buffer of 256 MiB each for send and recv; nothing is read or
 * written). One sample = CALLS_PER_SAMPLE calls back to back, timed together (clock_gettime,
 * CLOCK_MONOTONIC), divided by their number; one batch = SAMPLES samples, its value the median
 * sample; one round = one batch of each side for each size, the side that goes first alternating
 * from round to round. Rank 0 prints one line per round and size:
 *   round R bytes B pstate_ns P direct_ns D query_ns Q
 * (ns per call). Every rank runs the same loops; no call waits for a peer (nothing is moved), so
 * the ranks of world 2 time their own host work side by side. Every status is checked. A third
 * batch per round and size times one cudaPointerGetAttributes of a device buffer (query_ns), the
 * query behind each of pstate's pointer checks: on a GPU it says what those checks cost there.
 */
#include <pstate/pstate.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef cudaError_t (*set_device_fn)(int);
typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);
typedef cudaError_t (*stream_create_fn)(cudaStream_t *, unsigned int);
typedef cudaError_t (*stream_sync_fn)(cudaStream_t);
typedef cudaError_t (*stream_destroy_fn)(cudaStream_t);
typedef cudaError_t (*pointer_attributes_fn)(struct cudaPointerAttributes *, const void *);
typedef ncclResult_t (*unique_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*all_reduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                      cudaStream_t);
typedef ncclResult_t (*comm_destroy_fn)(ncclComm_t);

static all_reduce_fn nccl_all_reduce;
static pointer_attributes_fn pointer_attributes;
static ncclComm_t direct_comm;
static pstate_group_t *world;
static cudaStream_t stream;
static void *send_buf, *recv_buf;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "device_call_cost: %s: %s\n", what, why);
  exit(1);
}

static void *open_library(const char *variable, const char *fallback) {
  const char *name = getenv(variable);
  if (name == NULL || name[0] == '\0') name = fallback;
  void *h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL) die(name, dlerror());
  return h;
}

static void *symbol(void *lib, const char *name) {
  void *f = dlsym(lib, name);
  if (f == NULL) die(name, "symbol not found");
  return f;
}

/* count elements of float32 through pstate (side 0) or ncclAllReduce directly (side 1); side 2:
 * one cudaPointerGetAttributes of the send buffer (what each of pstate's pointer checks asks). */
static void call(int side, size_t count) {
  if (side == 2) {
    struct cudaPointerAttributes a;
    if (pointer_attributes(&a, send_buf) != cudaSuccess || a.type != cudaMemoryTypeDevice)
      die("cudaPointerGetAttributes", "failed or not device memory");
  } else if (side == 0) {
    if (pstate_all_reduce(world, send_buf, recv_buf, count, PSTATE_FLOAT32, PSTATE_SUM, stream) != PSTATE_OK)
      die("pstate_all_reduce", pstate_last_error());
  } else if (nccl_all_reduce(send_buf, recv_buf, count, ncclFloat32, ncclSum, direct_comm, stream) != ncclSuccess) {
    die("ncclAllReduce", "failed");
  }
}

/* The median over `samples` samples of `per_sample` calls each, in ns per call. */
static double batch(int side, size_t count, int samples, int per_sample, double *scratch) {
  for (int s = 0; s < samples; ++s) {
    double t0 = now_ns();
    for (int i = 0; i < per_sample; ++i) call(side, count);
    scratch[s] = (now_ns() - t0) / per_sample;
  }
  qsort(scratch, (size_t)samples, sizeof *scratch, cmp);
  return scratch[samples / 2];
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11, samples = argc > 2 ? atoi(argv[2]) : 2001,
      per_sample = argc > 3 ? atoi(argv[3]) : 16;
  if (rounds < 1 || samples < 1 || per_sample < 1) die("usage", "device_call_cost [ROUNDS] [SAMPLES] [CALLS_PER_SAMPLE]");
  static const size_t kBytes[] = {8, 1u << 20, 256u << 20};
  const size_t sizes = sizeof kBytes / sizeof kBytes[0], max_bytes = kBytes[sizes - 1];

  pstate_t *ps = NULL;
  pstate_init_params_t p = PSTATE_INIT_PARAMS_INIT;
  p.device = PSTATE_DEVICE_CUDA;
  if (pstate_init(&p, &ps) != PSTATE_OK) die("pstate_init", pstate_last_error());
  if (pstate_get_group(ps, PSTATE_GROUP_WORLD, &world) != PSTATE_OK) die("pstate_get_group", pstate_last_error());
  pstate_group_info_t info = PSTATE_GROUP_INFO_INIT;
  if (pstate_group_info(world, &info) != PSTATE_OK) die("pstate_group_info", pstate_last_error());

  /* The libraries pstate loaded (dlopen of the same name returns the same handle). */
  void *cudart = open_library("PSTATE_CUDA_RUNTIME_LIBRARY", "libcudart.so.13");
  void *nccl = open_library("PSTATE_NCCL_LIBRARY", "libnccl.so.2");
  set_device_fn set_device = (set_device_fn)symbol(cudart, "cudaSetDevice");
  malloc_fn cuda_malloc = (malloc_fn)symbol(cudart, "cudaMalloc");
  free_fn cuda_free = (free_fn)symbol(cudart, "cudaFree");
  stream_create_fn stream_create = (stream_create_fn)symbol(cudart, "cudaStreamCreateWithFlags");
  stream_sync_fn stream_sync = (stream_sync_fn)symbol(cudart, "cudaStreamSynchronize");
  stream_destroy_fn stream_destroy = (stream_destroy_fn)symbol(cudart, "cudaStreamDestroy");
  unique_id_fn unique_id = (unique_id_fn)symbol(nccl, "ncclGetUniqueId");
  init_rank_fn init_rank = (init_rank_fn)symbol(nccl, "ncclCommInitRank");
  comm_destroy_fn comm_destroy = (comm_destroy_fn)symbol(nccl, "ncclCommDestroy");
  nccl_all_reduce = (all_reduce_fn)symbol(nccl, "ncclAllReduce");
  pointer_attributes = (pointer_attributes_fn)symbol(cudart, "cudaPointerGetAttributes");

  if (set_device(info.local_rank) != cudaSuccess) die("cudaSetDevice", "failed");
  if (stream_create(&stream, cudaStreamNonBlocking) != cudaSuccess) die("cudaStreamCreateWithFlags", "failed");
  if (cuda_malloc(&send_buf, max_bytes) != cudaSuccess || cuda_malloc(&recv_buf, max_bytes) != cudaSuccess)
    die("cudaMalloc", "failed");

  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (info.rank_in_group == 0 && unique_id(&id) != ncclSuccess) die("ncclGetUniqueId", "failed");
  pstate_bytes_t shared = {NULL, 0};
  if (pstate_broadcast_object(world, &id, sizeof id, 0, &shared) != PSTATE_OK)
    die("pstate_broadcast_object", pstate_last_error());
  memcpy(&id, shared.data, sizeof id);
  pstate_bytes_free(&shared);
  if (init_rank(&direct_comm, info.world_size, id, info.rank_in_group) != ncclSuccess) die("ncclCommInitRank", "failed");

  /* Warm-up: pstate makes its communicator on the first call (collective over the world). */
  for (size_t k = 0; k < sizes; ++k)
    for (int side = 0; side < 2; ++side)
      for (int i = 0; i < 1000; ++i) call(side, kBytes[k] / sizeof(float));

  double *scratch = malloc(sizeof(double) * (size_t)samples);
  if (scratch == NULL) die("malloc", "out of memory");
  if (info.rank_in_group == 0)
    printf("# world %d, %d rounds, %d samples of %d calls per batch\n", info.world_size, rounds, samples, per_sample);
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < sizes; ++k) {
      double ns[3];
      const size_t count = kBytes[k] / sizeof(float);
      for (int j = 0; j < 2; ++j) {
        const int side = (j + r) % 2;  /* who goes first alternates */
        ns[side] = batch(side, count, samples, per_sample, scratch);
      }
      ns[2] = batch(2, count, samples, per_sample, scratch);
      if (info.rank_in_group == 0)
        printf("round %d bytes %zu pstate_ns %.1f direct_ns %.1f query_ns %.1f\n", r, kBytes[k], ns[0], ns[1], ns[2]);
      fflush(stdout);
    }
  }
  free(scratch);
  if (stream_sync(stream) != cudaSuccess) die("cudaStreamSynchronize", "failed");
  comm_destroy(direct_comm);
  cuda_free(send_buf);
  cuda_free(recv_buf);
  stream_destroy(stream);
  if (pstate_finalize(ps) != PSTATE_OK) die("pstate_finalize", pstate_last_error());
  return 0;
}
