/*
 * pstate.h — the one public header of pstate, the parallel state of an LLM serving runtime.
 *
 * pstate starts the distributed environment of one rank, cuts the world into the groups a model
 * needs (SGLang's tensor-, pipeline-, attention- and MoE-parallel groups, with SGLang's exact rank
 * layout) and runs the collectives those groups carry. This header is pure C99 (valid C++ too) and
 * is the whole ABI: opaque handles, every call returns a pstate_status_t, detailed text from
 * pstate_last_error(), parameter structs that start with `struct_size` and are filled from an
 * initializer macro so that fields can be appended without breaking old callers.
 *
 * Lifecycle (calls out of this order return PSTATE_ERR_INVALID_STATE naming the expected step):
 *   1. pstate_init                         rendezvous, world group, transports
 *   2. pstate_initialize_model_parallel    cut the world into groups (optional)
 *   3. collectives on the groups
 *   4. pstate_destroy_model_parallel       drop model-parallel groups; world stays (optional)
 *   5. pstate_finalize                     graceful teardown; pstate_abort when a peer is gone
 *
 * Thread rules, unless a declaration says otherwise: different pstate_t handles are independent
 * and may be driven from different threads at once (N ranks as N threads in one process works);
 * one thread at a time drives a pstate_t and its groups. The rule is enforced, not only stated:
 * a call on a pstate_t or one of its groups made while another thread is inside a call on the
 * same pstate_t returns PSTATE_ERR_BUSY at once (naming the call inside) and touches nothing; so
 * does a call from inside a pstate_alloc_fn callback on the callback's own context (one atomic
 * exchange per call). Exempt: pstate_group_info, pstate_group_ranks and pstate_group_same_node
 * (they only read facts fixed when the group was made), pstate_trace_dump, pstate_metrics_text, and the two calls a
 * watchdog thread makes: pstate_revoke and pstate_abort, which stop the call in flight on another
 * thread (it returns PSTATE_ERR_ABORTED within milliseconds: ncclCommAbort's role, for every
 * transport). pstate_last_error() is thread-local. Functions without a handle (layout, strings,
 * version) are thread-safe.
 *
 * Conventions, one set for the whole API (docs/abi.md states each in one line; a declaration
 * below repeats one only where it makes an exception):
 *   Structs       every struct pstate reads or fills starts with `size_t struct_size`, set by its
 *                 PSTATE_*_INIT macro (fill from it first, then set fields). pstate uses the first
 *                 min(struct_size, sizeof known to it) bytes. A smaller struct_size (a caller built
 *                 against an older 1.x pstate.h) is accepted down to the struct's 1.0 size; the
 *                 fields it lacks read as zero, and zero always means the older behaviour. A larger
 *                 one (a newer pstate.h) is accepted only when every byte past what this library
 *                 knows is zero (the caller left the new fields at their defaults); otherwise
 *                 INVALID_ARGUMENT names the struct and the first nonzero byte's offset. An out
 *                 struct (pstate_group_info_t) gets only its first min(struct_size, sizeof) bytes
 *                 written; the rest keeps what the caller's initializer put there.
 *   Struct arrays an array of structs (pstate_p2p_batch's ops, a tensor dict's tensors) is walked
 *                 by its elements' struct_size: every element carries one, all elements of one
 *                 array carry the same, and element i is at (const char *)base + i *
 *                 base[0].struct_size. An element whose struct_size differs from element 0's is
 *                 INVALID_ARGUMENT naming its index. (An array built with one pstate.h holds one
 *                 element type, so its elements' size is its stride: a library older or newer than
 *                 the caller finds every element without another argument.)
 *   Returned arrays  a call that returns an array takes (T *out, size_t capacity, size_t *count):
 *                 *count is always set to the number of elements of the whole answer, also when
 *                 capacity is too small, which is INVALID_ARGUMENT with nothing written to out; so
 *                 a caller may ask with out NULL and capacity 0 first. count must not be NULL.
 *   Out-parameters  every pointer a call returns a result through (*out, *req, *count, *index,
 *                 *done, *capture_stream, a pstate_bytes_t) is set on every error too: NULL, 0 or
 *                 {NULL, 0} (a too-small capacity's *count excepted, above). An out struct is left
 *                 as it was on error. An out array is written only on success.
 *   Ownership     every pointer argument is used only during the call: pstate copies what it keeps
 *                 (the strings of pstate_init_params_t, rank lists, tensor names). Two exceptions,
 *                 stated at their declarations: the buffer of a pending isend/irecv is pstate's
 *                 until the request completes, and pstate_set_interrupt_check keeps fn and user
 *                 until they are replaced or the context ends. What pstate returns is released by
 *                 the call named with it: a pstate_t by pstate_finalize or pstate_abort, a layout
 *                 by pstate_layout_destroy, a pstate_bytes_t by pstate_bytes_free, a request by
 *                 the pstate_wait/pstate_test that completes it; group handles, capture streams
 *                 and static strings are borrowed, for the lifetime their declaration states.
 *   Timeouts      int64_t milliseconds, named timeout_ms.
 *   Ranks         ranks passed to a group's calls are ranks in that group (rank_in_group). `root`
 *                 is the rank a rooted call centres on (broadcast, gather, reduce, scatter,
 *                 broadcast_object, broadcast_tensor_dict, group_same_node); `peer` is the other
 *                 rank of a point-to-point call (send, recv, isend, irecv, send_object,
 *                 recv_object, send/recv_tensor_dict(_sliced), pstate_p2p_op_t.peer).
 *   Counts        counts are elements, not bytes. `count` is the number of elements of ONE rank's
 *                 block: what each rank sends in all_gather and gather, what each rank receives
 *                 in reduce_scatter and scatter, one block of all_to_all; a buffer that holds
 *                 every rank's block holds world_size * count elements. The v-collectives take
 *                 `counts`, one per group rank.
 *   Numbers       enum values are never renumbered; new ones are appended (group kinds: see
 *                 pstate_group_kind_t).
 *
 * Handles after teardown: pstate_finalize and pstate_abort free the pstate_t and every group of
 * it. Using either afterwards (a second finalize, a group call, pstate_model_parallel_is_initialized)
 * is undefined behaviour, as an NCCL communicator after ncclCommDestroy: pstate cannot tell a
 * stale pointer from a live one without reading freed memory, so it does not try. Groups dropped
 * by pstate_destroy_model_parallel are different: they stay allocated until finalize/abort,
 * every operation on them returns PSTATE_ERR_INVALID_STATE ("destroyed"), also after a new
 * pstate_initialize_model_parallel, and pstate_group_info/ranks/same_node still answer from the
 * facts they had. pstate_finalize(NULL) and
 * pstate_abort(NULL) are no-ops returning PSTATE_OK.
 *
 * ABI: versions with the same PSTATE_VERSION_MAJOR are ABI compatible; the SONAME is
 * libpstate.so.<MAJOR>. Status, dtype, op, device and group-kind numbers are never renumbered.
 */
#ifndef PSTATE_PSTATE_H
#define PSTATE_PSTATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PSTATE_API __attribute__((visibility("default")))
#else
#define PSTATE_API
#endif

/* ------------------------------------------------------------------------------------------ */
/* Versions                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define PSTATE_VERSION_MAJOR 1
#define PSTATE_VERSION_MINOR 0
#define PSTATE_VERSION_PATCH 0
/** MAJOR*10000 + MINOR*100 + PATCH of this header. Compare with pstate_version() at run time. */
#define PSTATE_VERSION (PSTATE_VERSION_MAJOR * 10000 + PSTATE_VERSION_MINOR * 100 + PSTATE_VERSION_PATCH)
/** The ABI major that pstate_get_api() accepts for the table declared in this header. */
#define PSTATE_ABI_MAJOR PSTATE_VERSION_MAJOR

/* ------------------------------------------------------------------------------------------ */
/* Enumerations (stable numbers)                                                                */
/* ------------------------------------------------------------------------------------------ */

/* In C++ (C++11 on) the enumerations get `int` as their fixed underlying type. A C caller may pass
 * any int where an enum is expected, and the library validates it (PSTATE_ERR_INVALID_ARGUMENT);
 * without a fixed type, C++ code that merely loads an enum holding a value outside the enum's
 * range has undefined behaviour. Size (4 bytes) and values are the same as in C, so the ABI does
 * not change; C sees plain enums. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define PSTATE_ENUM_BASE : int
#else
#define PSTATE_ENUM_BASE
#endif

/** Result of every call. Numbers are stable and never reused; new ones are added at the end. */
typedef enum pstate_status_t PSTATE_ENUM_BASE {
  PSTATE_OK = 0,
  PSTATE_ERR_INVALID_ARGUMENT = 1, /**< a NULL pointer, a bad enum, a bad size, a bad rank */
  PSTATE_ERR_INVALID_STATE = 2,    /**< call out of lifecycle order; the message names the step */
  PSTATE_ERR_UNSUPPORTED = 3,      /**< valid request this build/context cannot do (fp8 reduce) */
  PSTATE_ERR_NO_MEMORY = 4,        /**< allocation failed */
  PSTATE_ERR_TIMEOUT = 5,          /**< a blocking call passed its timeout (context's or group's) */
  PSTATE_ERR_PEER_LOST = 6,        /**< a peer is known to be gone (process died, link closed) */
  PSTATE_ERR_TRANSPORT = 7,        /**< UCX, sockets, NCCL or CUDA reported an error */
  PSTATE_ERR_MISMATCH = 8,         /**< ranks disagree (world size, rank taken, config, a collective) */
  PSTATE_ERR_AUTH = 9,             /**< job token refused by the rendezvous store */
  PSTATE_ERR_ABORTED = 10,         /**< context failed earlier; only abort/finalize are allowed */
  PSTATE_ERR_INTERNAL = 11,        /**< a bug in pstate; the message says where */
  PSTATE_ERR_INTERRUPTED = 12,     /**< the interrupt check stopped a wait (pstate_set_interrupt_check) */
  PSTATE_ERR_BUSY = 13             /**< another thread is inside a call on the same pstate_t (or request):
                                        nothing was done; see the thread rules */
} pstate_status_t;

/** Element types. Values equal NCCL's ncclDataType_t. */
typedef enum pstate_dtype_t PSTATE_ENUM_BASE {
  PSTATE_INT8 = 0,
  PSTATE_UINT8 = 1,
  PSTATE_INT32 = 2,
  PSTATE_UINT32 = 3,
  PSTATE_INT64 = 4,
  PSTATE_UINT64 = 5,
  PSTATE_FLOAT16 = 6,
  PSTATE_FLOAT32 = 7,
  PSTATE_FLOAT64 = 8,
  PSTATE_BFLOAT16 = 9,
  PSTATE_FP8_E4M3 = 10, /**< move-only on CPU: reductions return PSTATE_ERR_UNSUPPORTED */
  PSTATE_FP8_E5M2 = 11  /**< move-only on CPU: reductions return PSTATE_ERR_UNSUPPORTED */
} pstate_dtype_t;
#define PSTATE_DTYPE_COUNT 12

/** Reduction operators. Values equal NCCL's ncclRedOp_t. AVG is SUM divided by the group size
 *  (integer division, truncating toward zero, for integer types). */
typedef enum pstate_reduce_op_t PSTATE_ENUM_BASE {
  PSTATE_SUM = 0,
  PSTATE_PROD = 1,
  PSTATE_MAX = 2,
  PSTATE_MIN = 3,
  PSTATE_AVG = 4
} pstate_reduce_op_t;
#define PSTATE_REDUCE_OP_COUNT 5

/** Where the tensors of the device communicator live. */
typedef enum pstate_device_t PSTATE_ENUM_BASE {
  PSTATE_DEVICE_CPU = 0, /**< host memory; the CPU communicator carries tensors too */
  PSTATE_DEVICE_CUDA = 1 /**< CUDA device memory; NCCL carries tensors */
} pstate_device_t;

/** The groups of SGLang's and vLLM's parallel_state.py. Two ranges: the layout kinds
 *  0..PSTATE_GROUP_KIND_COUNT-1 (the ones pstate_get_group and the layout calls take; a new layout
 *  kind is appended at PSTATE_GROUP_KIND_COUNT, which grows with it) and, from 1000 on, kinds that
 *  are not in the layout (PSTATE_GROUP_CUSTOM first; a new one is appended at 1001, ...).
 *  Which kinds a layout has depends on its engine (pstate_parallel_config_t.engine): SGLang's
 *  layout has WORLD .. SELF_PP; vLLM's has WORLD, TP, PP, DCP (when dcp > 1), DP, PCP, and EP and
 *  EPLB (for a MoE model). A kind the layout lacks has 0 groups (pstate_layout_group_count) and
 *  pstate_get_group refuses it with PSTATE_ERR_UNSUPPORTED naming what would make it exist. */
typedef enum pstate_group_kind_t PSTATE_ENUM_BASE {
  PSTATE_GROUP_WORLD = 0,             /**< every rank */
  PSTATE_GROUP_TP = 1,                /**< tensor parallel: tp consecutive ranks */
  PSTATE_GROUP_PP = 2,                /**< pipeline parallel: ranks tp apart */
  PSTATE_GROUP_ATTN_TP = 3,           /**< attention TP: tp / attn_dp / attn_cp */
  PSTATE_GROUP_ATTN_CP = 4,           /**< attention context parallel */
  PSTATE_GROUP_MOE_EP = 5,            /**< MoE expert parallel */
  PSTATE_GROUP_MOE_TP = 6,            /**< MoE tensor parallel: tp / ep / moe_dp */
  PSTATE_GROUP_MOE_DP = 7,            /**< MoE data parallel */
  PSTATE_GROUP_DCP = 8,               /**< decode context parallel; exists only when dcp > 1 */
  PSTATE_GROUP_SHARED_EXPERTS_TP = 9, /**< shared-experts TP; exists only when size > 1 */
  PSTATE_GROUP_SELF_PP = 10,          /**< each rank alone: SGLang's per-rank "self" PP group */
  PSTATE_GROUP_DP = 11,               /**< vLLM: data parallel, one rank of each DP replica */
  PSTATE_GROUP_PCP = 12,              /**< vLLM: prefill context parallel, ranks tp apart */
  PSTATE_GROUP_EP = 13,               /**< vLLM: expert parallel, dp x pcp x tp of one PP stage
                                           (MoE models only) */
  PSTATE_GROUP_EPLB = 14,             /**< vLLM: EP's ranks on a group of their own, for expert
                                           load balancing (MoE models only) */
  PSTATE_GROUP_CUSTOM = 1000          /**< a group of pstate_new_group ("custom:<n>"); not in the
                                           layout: pstate_get_group and the layout calls refuse it */
} pstate_group_kind_t;
/** The number of layout kinds (0..PSTATE_GROUP_KIND_COUNT-1), the ones pstate_get_group and the
 *  layout calls take. Grows when a layout kind is appended. */
#define PSTATE_GROUP_KIND_COUNT 15
/** The first kind that is not a layout kind: kinds >= PSTATE_GROUP_FIRST_NON_LAYOUT_KIND are made
 *  otherwise (pstate_new_group) and never name a layout group. */
#define PSTATE_GROUP_FIRST_NON_LAYOUT_KIND 1000

/** The serving engine whose rank layout a parallel config describes
 *  (pstate_parallel_config_t.engine): the groups pstate_initialize_model_parallel makes and
 *  pstate_layout_create computes, with that engine's rank lists and order. */
typedef enum pstate_engine_t PSTATE_ENUM_BASE {
  PSTATE_ENGINE_SGLANG = 0, /**< SGLang's initialize_model_parallel (the default): world = tp x pp */
  PSTATE_ENGINE_VLLM = 1    /**< vLLM's initialize_model_parallel: world = ExternalDP x dp x pp x pcp x tp */
} pstate_engine_t;
#define PSTATE_ENGINE_COUNT 2

/* ------------------------------------------------------------------------------------------ */
/* Handles                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/** One rank's parallel state. Created by pstate_init, freed by pstate_finalize/pstate_abort. */
typedef struct pstate_s pstate_t;
/** One group of a pstate_t. Borrowed: owned by its pstate_t. A model-parallel group is usable
 *  until pstate_destroy_model_parallel; after it, it stays allocated and answers
 *  PSTATE_ERR_INVALID_STATE. Every group is freed by pstate_finalize/abort: using it after that
 *  is undefined behaviour (see "Handles after teardown" above). */
typedef struct pstate_group_s pstate_group_t;
/** A computed rank layout (no communication). Freed by pstate_layout_destroy. */
typedef struct pstate_layout_s pstate_layout_t;

/* ------------------------------------------------------------------------------------------ */
/* Parameter structs (fill from the initializer macro first, then set fields)                   */
/* ------------------------------------------------------------------------------------------ */

/** Parameters of pstate_init. Any -1 / NULL / 0 means "from the environment or default". */
typedef struct pstate_init_params_t {
  size_t struct_size;      /**< sizeof(pstate_init_params_t); set by PSTATE_INIT_PARAMS_INIT */
  int world_size;          /**< -1: WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS */
  int rank;                /**< -1: RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID */
  int local_rank;          /**< -1: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, else 0 */
  const char *init_method; /**< NULL or "env://": PSTATE_STORE, else MASTER_ADDR/MASTER_PORT (in a
                                LeaderWorkerSet pod LWS_LEADER_ADDRESS); "tcp://HOST:PORT";
                                "file:///PATH" (a shared-filesystem store);
                                "etcd://HOST:PORT[,HOST:PORT...]/PREFIX" (an etcd cluster's
                                client endpoints and the job's key prefix; "etcds://" for TLS) */
  pstate_device_t device;  /**< PSTATE_DEVICE_CPU (default) or PSTATE_DEVICE_CUDA */
  int device_ordinal;      /**< CUDA device index; -1: the local rank */
  int64_t timeout_ms;      /**< every blocking call's deadline; 0: PSTATE_TIMEOUT_MS or 600000 */
  const char *job_token;   /**< shared secret of the job; NULL: PSTATE_JOB_TOKEN or none */
  const char *socket_ifname; /**< network interface for the store and UCX TCP; NULL:
                                  PSTATE_SOCKET_IFNAME or chosen by the address */
} pstate_init_params_t;

#define PSTATE_INIT_PARAMS_INIT                                                              \
  { sizeof(pstate_init_params_t), -1, -1, -1, NULL, PSTATE_DEVICE_CPU, -1, 0, NULL, NULL }

/** Sizes of the model-parallel layout (SGLang's initialize_model_parallel arguments; with engine
 *  PSTATE_ENGINE_VLLM, vLLM's: see "vLLM's layout" after the struct). Under SGLang, world_size
 *  must equal tensor_parallel_size * pipeline_parallel_size.
 *
 *  Defaults, one rule for every front end (C, `pstate layout`/`bench`, Python, Go, Rust): a size
 *  of 0 means "the default": tensor_parallel_size 0 is world_size / pipeline_parallel_size (the
 *  whole world when pipeline_parallel_size is 0 or 1; INVALID_ARGUMENT when pp does not divide
 *  the world), every other size 0 is 1, and shared_experts_tensor_parallel_size 0 is "no group".
 *  A negative size is INVALID_ARGUMENT. The bindings' "not given" (None, a zero field) and the
 *  CLI's omitted option are 0, so `pipeline_parallel_size = 2` alone on 4 ranks is tp 2 x pp 2
 *  everywhere. PSTATE_PARALLEL_CONFIG_INIT sets 1s and 0 (pstate's contract): in C, set
 *  tensor_parallel_size to 0 to get world / pp. A NULL config is the all-0 config (tp = world).
 *  Ranks compare the sizes after applying the defaults (tp 0 and tp 2 agree on 4 ranks, pp 2). */
typedef struct pstate_parallel_config_t {
  size_t struct_size;                    /**< sizeof(pstate_parallel_config_t); set by the initializer */
  int tensor_parallel_size;              /**< tp, >= 1; 0: world_size / pipeline_parallel_size */
  int pipeline_parallel_size;            /**< pp, >= 1; 0: 1 */
  int expert_parallel_size;              /**< ep, divides tp / moe_dp; 0: 1 */
  int attention_data_parallel_size;      /**< attn_dp; 0: 1 */
  int attention_context_parallel_size;   /**< attn_cp; attn_tp = tp / attn_dp / attn_cp; 0: 1 */
  int moe_data_parallel_size;            /**< moe_dp; moe_tp = tp / ep / moe_dp; 0: 1 */
  int decode_context_parallel_size;      /**< dcp; divides tp; a DCP group exists when > 1; 0: 1 */
  int shared_experts_tensor_parallel_size; /**< 0 = none; else divides attn_tp */
  /* 1.x: vLLM's layout. An older caller's struct ends above: it is SGLang's, as before. */
  pstate_engine_t engine;                /**< whose layout: PSTATE_ENGINE_SGLANG (0, default) or
                                              PSTATE_ENGINE_VLLM; see "vLLM's layout" below */
  int data_parallel_size;                /**< vLLM's dp, >= 1; 0: 1. SGLang: 0 or 1 only */
  int prefill_context_parallel_size;     /**< vLLM's pcp, >= 1; 0: 1. SGLang: 0 or 1 only */
  int moe_model;                         /**< vLLM: 1 = a MoE model, which gets EP and EPLB groups;
                                              0 (default) = a dense model, which has none. 0 or 1
                                              (SGLang: its MoE groups always exist; no effect) */
} pstate_parallel_config_t;
/*  vLLM's layout (engine PSTATE_ENGINE_VLLM; vLLM's initialize_model_parallel): the world is
 *  laid out as all_ranks = arange(world).reshape(-1, dp, pp, pcp, tp), the first axis being
 *  ExternalDP = world_size / (dp * pp * pcp * tp), which must be a whole number (the world need
 *  not be tp x pp there). tensor_parallel_size 0 is world_size / (dp * pp * pcp). Groups: tp along
 *  the last axis; dcp consecutive blocks of dcp ranks of each tp group (decode_context_parallel_size
 *  divides tp; a group exists when > 1); pcp, pp and dp along their axes (moved last, then cut);
 *  ep and eplb (moe_model 1) the dp x pcp x tp ranks of one pipeline stage of one ExternalDP
 *  replica. Each group's ranks and the groups' order are vLLM's (`pstate layout --engine vllm`
 *  prints them). SGLang's other sizes (expert_parallel_size, attention_data_parallel_size,
 *  attention_context_parallel_size, moe_data_parallel_size) must stay 0 or 1 and
 *  shared_experts_tensor_parallel_size 0 or 1: vLLM's EP is asked for by moe_model. */

#define PSTATE_PARALLEL_CONFIG_INIT                                                          \
  { sizeof(pstate_parallel_config_t), 1, 1, 1, 1, 1, 1, 1, 0, PSTATE_ENGINE_SGLANG, 1, 1, 0 }

/** Length of pstate_group_info_t.name, terminator included. */
#define PSTATE_GROUP_NAME_MAX 32

/** Facts about one group as seen from this rank (SGLang's GroupCoordinator properties). */
typedef struct pstate_group_info_t {
  size_t struct_size;       /**< set by PSTATE_GROUP_INFO_INIT before the call */
  pstate_group_kind_t kind; /**< the kind the group was made as, not the kind it was asked for
                                 as: an aliased kind (one the layout makes the same group as
                                 another, as SGLang does: ATTN_TP, ATTN_CP, MOE_EP, MOE_TP or
                                 MOE_DP of the size of TP, SHARED_EXPERTS_TP of the size of ATTN_TP)
                                 returns that group, which reports its own kind and name (ATTN_TP
                                 with attn_tp == tp: PSTATE_GROUP_TP, "tp:0");
                                 PSTATE_GROUP_CUSTOM for pstate_new_group's groups */
  int rank;                 /**< this rank's global rank */
  int rank_in_group;        /**< this rank's index in the group */
  int world_size;           /**< number of ranks in the group */
  int local_rank;           /**< this process's local rank on its host (device index) */
  int first_rank;           /**< global rank of group index 0 */
  int last_rank;            /**< global rank of group index world_size-1 */
  int next_rank;            /**< global rank of index (rank_in_group+1) % world_size */
  int prev_rank;            /**< global rank of index (rank_in_group-1) % world_size */
  char name[PSTATE_GROUP_NAME_MAX]; /**< "<kind>:<index of the group among its kind>", e.g. "tp:0" */
} pstate_group_info_t;

#define PSTATE_GROUP_INFO_INIT                                                                \
  { sizeof(pstate_group_info_t), PSTATE_GROUP_WORLD, -1, -1, 0, -1, -1, -1, -1, -1, { 0 } }

/** Variable-length bytes returned by the object operations. `data` is allocated by pstate and
 *  released with pstate_bytes_free (also when empty: data may be NULL with size 0). */
typedef struct pstate_bytes_t {
  void *data;
  size_t size;
} pstate_bytes_t;

/* ------------------------------------------------------------------------------------------ */
/* Errors and versions                                                                          */
/* ------------------------------------------------------------------------------------------ */

/** Static name of a status ("PSTATE_ERR_TIMEOUT"); "PSTATE_UNKNOWN_STATUS" for other numbers. */
PSTATE_API const char *pstate_status_string(pstate_status_t s);
/** This thread's detailed message of its last failed call: what, where, and what to do.
 *  "" when the thread has had no failure. Valid until this thread's next pstate call. */
PSTATE_API const char *pstate_last_error(void);
/** The library's version, MAJOR*10000 + MINOR*100 + PATCH. */
PSTATE_API uint32_t pstate_version(void);
/** Static names: "float32", "sum", "tp", "cpu". NULL for an out-of-range value. */
PSTATE_API const char *pstate_dtype_name(pstate_dtype_t dtype);
PSTATE_API const char *pstate_reduce_op_name(pstate_reduce_op_t op);
PSTATE_API const char *pstate_group_kind_name(pstate_group_kind_t kind);
/** Bytes per element of dtype; 0 for an out-of-range value. */
PSTATE_API size_t pstate_dtype_size(pstate_dtype_t dtype);

/* ------------------------------------------------------------------------------------------ */
/* Layout: pure rank math, no communication (for launchers, planners and tests)                 */
/* ------------------------------------------------------------------------------------------ */

/** Computes the groups of cfg's engine (SGLang's, or vLLM's with engine PSTATE_ENGINE_VLLM) for
 *  world_size ranks. cfg NULL = SGLang's, all sizes 1 except tp = world_size; a size of 0 in cfg
 *  is its default (see pstate_parallel_config_t).
 *  Errors: PSTATE_ERR_INVALID_ARGUMENT with one message per cause (world != tp*pp, or under vLLM
 *  world not divisible by dp*pp*pcp*tp; a size that does not divide, a size < 0, a size of the
 *  other engine, world_size > 1048576). */
PSTATE_API pstate_status_t pstate_layout_create(int world_size, const pstate_parallel_config_t *cfg,
                                                pstate_layout_t **out);
/** Number of groups of `kind`; 0 for kinds that do not exist in this layout (dcp == 1, a kind of
 *  the other engine, vLLM's EP and EPLB of a dense model). */
PSTATE_API pstate_status_t pstate_layout_group_count(const pstate_layout_t *l, pstate_group_kind_t kind,
                                                     size_t *count);
/** Ranks of group `index` of `kind`, ascending: a returned array (*count = the group size).
 *  Groups are indexed in the order their engine creates them (vLLM's: its reshape's rows). */
PSTATE_API pstate_status_t pstate_layout_group_ranks(const pstate_layout_t *l, pstate_group_kind_t kind,
                                                     size_t index, int *ranks, size_t capacity,
                                                     size_t *count);
/** Index of the group of `kind` that contains global `rank`. */
PSTATE_API pstate_status_t pstate_layout_group_of(const pstate_layout_t *l, pstate_group_kind_t kind,
                                                  int rank, size_t *index);
/** Frees a layout; NULL is a no-op. */
PSTATE_API void pstate_layout_destroy(pstate_layout_t *l);

/* ------------------------------------------------------------------------------------------ */
/* Lifecycle                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/** init_distributed_environment: rendezvous through init_method, connects the transports and
 *  returns with the world group ready. Collective over all world ranks; blocks up to the timeout.
 *  params NULL = all defaults (everything from the environment).
 *  device = PSTATE_DEVICE_CUDA loads the CUDA runtime (and NCCL when world_size > 1; the file
 *  named by PSTATE_NCCL_LIBRARY, else libnccl.so.2) and makes device_ordinal (-1: local_rank)
 *  current on the calling thread, before the rendezvous: a rank that cannot run CUDA fails at
 *  once, without contacting the store. No NCCL communicator is made here (see the collectives).
 *  Errors: INVALID_ARGUMENT (bad params or environment, device_ordinal past the device count),
 *  TIMEOUT (peers did not arrive), AUTH (job token refused), MISMATCH (rank taken, world sizes
 *  differ), TRANSPORT, UNSUPPORTED (device CUDA where it cannot be had: "no CUDA device: ...",
 *  "CUDA runtime not found ...", "NCCL library not found ...", or a build without the backend;
 *  the message names every missing piece). */
PSTATE_API pstate_status_t pstate_init(const pstate_init_params_t *params, pstate_t **out);

/** initialize_model_parallel: creates every group kind of the layout for cfg (NULL = tp =
 *  world; a size of 0 is its default, see pstate_parallel_config_t). Collective over the world.
 *  Under vLLM (engine PSTATE_ENGINE_VLLM) the groups are vLLM's: WORLD, TP, PP, DP, PCP, DCP
 *  (dcp > 1), EP and EPLB (moe_model 1), each a group object of its own (EPLB is a second group
 *  over EP's ranks, so that its calls never wait behind EP's); pstate_group_info reports
 *  rank_in_group and first/last/next/prev as vLLM's GroupCoordinator does from its ranks. The ranks first compare their configs (one all-gather of
 *  the sizes and the engine over the world group): when any two differ every rank returns MISMATCH
 *  naming both ("rank 0 tp 1 pp 2, rank 1 tp 2 pp 1"), nothing is created and the context is
 *  unchanged (call it again with agreeing configs, or finalize). INVALID_STATE when already
 *  initialized (destroy first) or in graph-capture mode. CUDA contexts: when the world group's
 *  NCCL communicator exists (a device operation ran on it), every group of more than one rank
 *  gets its communicator here by ncclCommSplit from it (splitShare; PSTATE_NCCL_SPLIT=0: no),
 *  else each makes its own on first use. */
PSTATE_API pstate_status_t pstate_initialize_model_parallel(pstate_t *ps, const pstate_parallel_config_t *cfg);

/** 1 when model-parallel groups exist, 0 otherwise (also for NULL). */
PSTATE_API int pstate_model_parallel_is_initialized(const pstate_t *ps);

/** destroy_model_parallel: drops the model-parallel and custom groups (their pstate_group_t stay
 *  allocated until finalize and answer INVALID_STATE); the world group stays. Collective over the
 *  world: the ranks count the point-to-point messages sent on those groups and each drops the ones
 *  no receive of its took (logged at WARN), so a later group that gets the same id never receives
 *  them; in a CUDA context each group's NCCL communicator is finalized with its peers (bounded by
 *  the timeout). INVALID_STATE when none exist, while a request is pending on one of them, or in
 *  graph-capture mode. In a failed context it only drops the groups, locally. */
PSTATE_API pstate_status_t pstate_destroy_model_parallel(pstate_t *ps);

/** destroy_distributed_environment: drops every group, closes transports and the store, frees
 *  ps. Waits for peers (up to the timeout) so in-flight messages complete (not after a failure or
 *  pstate_revoke: then it releases everything locally, as pstate_abort); returns the first error
 *  but frees. A store that could not be left cleanly is an error too: an etcd:// store whose
 *  close etcd refused or left unanswered (the job's keys stay under its prefix until a later job
 *  there reclaims them) returns the store's status (PSTATE_ERR_PEER_LOST when no etcd member
 *  answered), everything else released all the same. NULL is a no-op returning PSTATE_OK. Two
 *  cases free nothing and leave ps valid: another thread inside a call on ps (PSTATE_ERR_BUSY:
 *  call it again once that call returned), and graph-capture mode (CUDA; INVALID_STATE: call
 *  pstate_graph_capture_end, then finalize again; pstate_abort always frees). */
PSTATE_API pstate_status_t pstate_finalize(pstate_t *ps);

/** Local teardown that never blocks on peers (use after PEER_LOST/TIMEOUT, or from a watchdog):
 *  frees ps and returns PSTATE_OK. NULL is a no-op. Any thread, at any time, once: when another
 *  thread is inside a call on ps, pstate_abort first stops that call as pstate_revoke does (it
 *  returns PSTATE_ERR_ABORTED within milliseconds, on shared memory, UCX, the store and NCCL's
 *  non-blocking calls), waits for it to return, then frees. Only a thread that stays outside
 *  pstate's waits for 10 s (inside a callback of yours: an alloc function, an interrupt check)
 *  makes it return PSTATE_ERR_BUSY with nothing freed (the abort stays requested: call it again
 *  after that call returned); called from inside a call on ps on the same thread (a signal
 *  handler run by an interrupt check, a callback), it returns PSTATE_ERR_BUSY at once, the call
 *  it interrupts then returns ABORTED, and a second pstate_abort after it frees. No thread may
 *  start a call on ps after pstate_abort: a watchdog
 *  that cannot rule that out calls pstate_revoke, and the thread that drives ps calls
 *  pstate_abort when its call has returned ABORTED. Peers learn it from a failure notice: the
 *  stopped call's, or, when no call was in flight and the context had not failed, one that
 *  pstate_abort sends before it frees (a peer blocked in a call with this rank returns ABORTED
 *  at its next liveness check, not at its timeout). */
PSTATE_API pstate_status_t pstate_abort(pstate_t *ps);

/** Stops every call in flight on ps, from any thread, at any time while ps is allocated, without
 *  freeing anything (ncclCommRevoke's role): the call another thread is inside returns
 *  PSTATE_ERR_ABORTED within milliseconds (shared memory: at its next liveness check, every 20
 *  ms; UCX and the TCP store: at once; NCCL: at the next poll of a non-blocking call), its peers
 *  hear it from the context's failure notice (with no call in flight, pstate_revoke sends that
 *  notice itself), and every later call on ps or its groups returns ABORTED at entry, except
 *  pstate_abort and pstate_finalize, which free ps (finalize then never waits for peers).
 *  Idempotent. Never waits for peers (a notice to a peer whose address this rank never read
 *  first reads it from the store, bounded to 1 s). For watchdogs and language bindings whose threads
 *  cannot know whether the thread that drives ps is about to start a call: revoke, let that
 *  thread see ABORTED, then free with pstate_abort from the thread that drives ps. */
PSTATE_API pstate_status_t pstate_revoke(pstate_t *ps);

/** An interrupt check (pstate_set_interrupt_check): returns nonzero to stop the wait it is
 *  called from, 0 to let it go on. */
typedef int (*pstate_interrupt_fn)(void *user);

/** Registers fn(user) as the interrupt check of ps (fn NULL removes it). A language runtime that
 *  handles signals itself uses it so that Ctrl-C reaches a rank blocked in pstate: the Python
 *  binding's check runs PyErr_CheckSignals under the GIL, Go's and Rust's read a flag that
 *  another goroutine/thread or a signal handler sets.
 *  When: every wait on the CPU communicator (UCX and shared memory: collectives, point-to-point,
 *  objects, tensor-dict metadata, barriers, the finalize barrier) of a call on ps or its groups
 *  calls fn on the calling thread at least every ~100 ms while it waits, and at once when a signal
 *  interrupts its sleep (poll/futex EINTR); a call that never waits never calls it. Not during
 *  pstate_init (there is no ps yet), pstate_abort (it never waits), NCCL's own waits (communicator
 *  creation, a device call that does not complete: bounded by the timeout) or work enqueued on a
 *  CUDA stream.
 *  Nonzero: the call fails with PSTATE_ERR_INTERRUPTED ("interrupted while waiting for ...") and
 *  the context is failed, as after PEER_LOST: the peers were left inside the operation, so later
 *  calls return ABORTED; call pstate_abort (never blocks) or pstate_finalize (skips the world
 *  barrier of a failed context) next. fn must not call pstate on ps (PSTATE_ERR_BUSY: the call it
 *  interrupts still holds the context) and should return quickly. Not collective; a check is
 *  per context (ranks as threads each register their own). */
PSTATE_API pstate_status_t pstate_set_interrupt_check(pstate_t *ps, pstate_interrupt_fn fn, void *user);

/** Writes this rank's flight-recorder dump now (docs/trace-format.md): the last
 *  PSTATE_TRACE_ENTRIES operations of every group with their state, read by `pstate doctor`.
 *  path NULL: $PSTATE_TRACE_DIR/rank<R>.pstate-trace (default folder: pstate-trace under the
 *  working directory); an existing directory: rank<R>.pstate-trace in it; else the file itself.
 *  Written atomically (a temporary file renamed over path). Local, never blocks on peers, and may
 *  be called from any thread, also while another thread is inside a call on ps (that is what it
 *  is for). Dumps are also written on their own when a call fails with TIMEOUT, PEER_LOST,
 *  MISMATCH or ABORTED, when a dump is asked for through the job's tcp:// store (`pstate run`
 *  does: a thread of pstate's own answers, no signal), and on SIGUSR1 when the process was started
 *  with PSTATE_TRACE_SIGNAL=1 (pstate then installs its handler, over the default action only).
 *  UNSUPPORTED when the recorder is off
 *  (PSTATE_TRACE_ENTRIES=0); INVALID_ARGUMENT naming the path when it cannot be written. */
PSTATE_API pstate_status_t pstate_trace_dump(pstate_t *ps, const char *path);

/* ------------------------------------------------------------------------------------------ */
/* Groups                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/** The group of `kind` that contains this rank. WORLD always exists after pstate_init; others
 *  need pstate_initialize_model_parallel (INVALID_STATE otherwise), DCP and SHARED_EXPERTS_TP
 *  only when configured (UNSUPPORTED otherwise). Aliased kinds return the same pointer. */
PSTATE_API pstate_status_t pstate_get_group(pstate_t *ps, pstate_group_kind_t kind, pstate_group_t **out);
/** Fills *out (which the caller filled from PSTATE_GROUP_INFO_INIT). */
PSTATE_API pstate_status_t pstate_group_info(const pstate_group_t *g, pstate_group_info_t *out);
/** Global ranks of the group in group order: a returned array (*count = the group size). */
PSTATE_API pstate_status_t pstate_group_ranks(const pstate_group_t *g, int *ranks, size_t capacity, size_t *count);
/** The live ranks of the world as this rank knows them: global ranks, ascending, this rank
 *  included. A rank is dead once its connection to the job's TCP store has closed (the store
 *  sees every rank's process end, on any host; one round trip to it), its process has exited (a
 *  rank of this host) or its UCX endpoint reported a peer failure. A rank that is merely slow is
 *  live, and so, where the store cannot tell (a file:// store; a store that died with rank 0),
 *  is a rank of another host that no operation has touched since it died. A rank that has
 *  finalized has left the store: it is not live either. Local, not collective; works in a failed
 *  context (after PSTATE_ERR_PEER_LOST, to learn who is gone: there, while the store still lists
 *  every rank, it asks again for up to 1 s, since the news of a death can reach a rank before the
 *  store has read the dead's connection end). A returned array: *count = the number of live
 *  ranks (a capacity of the world size is always enough). */
PSTATE_API pstate_status_t pstate_live_ranks(pstate_t *ps, int *ranks, size_t capacity, size_t *count);
/** Collective over the survivors, after a call returned PEER_LOST (or ABORTED because of one).
 *  Every live rank calls it; they agree on the set of live ranks within the context timeout
 *  (through the job's store: a rank is dead once its process ended — its store connection
 *  closed, or, on this host, its pid exited; a rank that is merely slow is waited for), drop every
 *  model-parallel and custom group (their handles then answer INVALID_STATE, saying they were
 *  replaced by pstate_shrink; the old world group's too: get it again with pstate_get_group) and
 *  the dead ranks' state, and rebuild the
 *  world group from the survivors, ranks renumbered in their old order. new_rank is a returned
 *  array of the world size before the call: new_rank[i] is rank i's new rank, -1 for a dead one
 *  (*count = the old world size). One exception to the returned-array rule: new_rank NULL with
 *  capacity 0 skips the map (shrink still runs; *count is set). A too-small capacity otherwise is
 *  INVALID_ARGUMENT before anything is done.
 *  A rank that dies during the call does not break it: the survivors still end with one answer.
 *  On return the world works again and pstate_initialize_model_parallel may be called with a
 *  config that fits the new world size. The store must outlive the dead: when launch rank 0
 *  served it and died, this fails with PEER_LOST saying so (use `pstate run` or `pstate store`
 *  with PSTATE_STORE_EXTERNAL=1). Error messages and pstate_group_info speak the new ranks; logs
 *  and flight-recorder dumps keep each process's launch rank. */
PSTATE_API pstate_status_t pstate_shrink(pstate_t *ps, int *new_rank, size_t capacity, size_t *count);
/** Collective over the world: admits the replacement processes waiting to join (started with
 *  PSTATE_REJOIN=1 and the RANK of a dead rank; their pstate_init returns once admitted) and
 *  rebuilds the world with them appended, in launch-rank order; every model-parallel and custom
 *  group is dropped, so call pstate_initialize_model_parallel again (the dropped handles, and the
 *  old world group's, answer INVALID_STATE saying they were replaced by pstate_grow). Waits up to timeout_ms for
 *  at least one; none in time: PSTATE_ERR_TIMEOUT, the world unchanged and usable. The job
 *  token is checked as at start (a process without it never reaches the store). A negative
 *  timeout_ms is INVALID_ARGUMENT. */
PSTATE_API pstate_status_t pstate_grow(pstate_t *ps, int64_t timeout_ms);
/** Custom groups (SGLang's create_custom_parallel_group, vLLM's new_group: speculative decoding,
 *  EPLB). Collective over the world: every rank calls it, passing the global ranks of the group
 *  it joins (strictly ascending, itself among them; count ranks at `ranks`), or count 0 to join
 *  none (*out = NULL). One call may make several groups: they may not overlap, and every rank
 *  of a group must pass the same list. *out is the new group (kind PSTATE_GROUP_CUSTOM, name
 *  "custom:<n>", n counting the custom groups of the world in creation order, the groups of one
 *  call ordered by first rank); every operation works on it, as on a model-parallel group (in a
 *  CUDA context its NCCL communicator is split from the world's when that exists; a group of one
 *  makes none). It lives like the model-parallel groups: pstate_destroy_model_parallel retires it
 *  (the handle stays allocated and answers INVALID_STATE; destroy also works when only custom
 *  groups exist), pstate_finalize/abort free it. Not in graph-capture mode (INVALID_STATE).
 *  Every rank sees every rank's list (one all-gather over the world) and checks it the same way,
 *  so every rank returns the same error naming the offending ranks, nothing is created and the
 *  world stays usable: INVALID_ARGUMENT for a list that is not ascending, holds a rank outside
 *  the world, lacks the rank that passed it, is NULL with count > 0, or overlaps another rank's
 *  different list; MISMATCH when a rank named by a list passed count 0. One thread at a time per
 *  context. */
PSTATE_API pstate_status_t pstate_new_group(pstate_t *ps, const int *ranks, size_t count, pstate_group_t **out);

/** SGLang's in_the_same_node_as(source_rank=root): same_node[i] = 1 when group rank i is on the
 *  same host as group rank `root`, else 0. A returned array (*count = the group size). Local, not
 *  collective. */
PSTATE_API pstate_status_t pstate_group_same_node(const pstate_group_t *g, int root, int *same_node,
                                                  size_t capacity, size_t *count);

/** The group's own timeout on this rank: every later call of g (collectives, point-to-point,
 *  objects, tensor dicts, the wait/test of a request posted afterwards, a device call's host-side
 *  waits: NCCL's non-blocking polls, stream drains) is bounded by timeout_ms instead of the
 *  context's timeout: shorter for a health check, longer for a large weight broadcast (a sibling
 *  set of ranks can have its own group: pstate_new_group). 0 gives g the context's timeout again;
 *  negative is INVALID_ARGUMENT. A call that passes it returns TIMEOUT, whose text names the
 *  group's timeout, and fails the context as every TIMEOUT does. Local, not collective: each rank
 *  bounds its own waits, so set it alike on every rank of g. Per group rather than per call: a
 *  per-call deadline would need a new variant of every call of this header (docs/timeouts.md).
 *  Groups that pstate_shrink or pstate_grow rebuild start with the context's. */
PSTATE_API pstate_status_t pstate_group_set_timeout(pstate_group_t *g, int64_t timeout_ms);
/** *timeout_ms = the timeout g's calls use on this rank (its own, or the context's). */
PSTATE_API pstate_status_t pstate_group_timeout(const pstate_group_t *g, int64_t *timeout_ms);

/* ------------------------------------------------------------------------------------------ */
/* Collectives and point-to-point (ranks are ranks in the group)                                */
/*                                                                                              */
/* CPU contexts: the call returns when the operation is complete; `stream` must be NULL.        */
/* CUDA contexts: the operation is enqueued on `stream` (cudaStream_t; NULL = the context's     */
/* stream) and the call returns at once, as in NCCL. Every rank of the group must call the same */
/* collectives in the same order with the same count, dtype, op and root. CPU contexts check it */
/* on every call, always: ranks that disagree about a collective (kind, count, dtype, reduce op, */
/* root; the library's own finalize barrier counts as a call of its own) get MISMATCH on every  */
/* rank of the call, naming both sides, and no rank returns OK; inside a host the descriptor    */
/* rides in the shared-memory protocol's flag words (no extra hand-off), on UCX groups ranks    */
/* exchange descriptors first. A mismatch found inside the shared-memory protocol fails the     */
/* context (later calls: ABORTED); one found by an exchange leaves it usable. PSTATE_CHECK=1    */
/* adds the exchange everywhere: sequence numbers, and CUDA-context collectives (which are not  */
/* checked otherwise: a check would cost a host round trip per stream-ordered call).            */
/* count 0 is legal; a buffer of more than 2^47 bytes (128 TiB: count x element size x blocks, */
/* on every rank) is INVALID_ARGUMENT, as no address space holds it.                            */
/* Reductions give bit-identical results on every rank of one call; float16/bfloat16 reduce     */
/* through float32, rounding to nearest even after every step, in an order that depends on the  */
/* path: the shared-memory path (one host) and the UCX path (PSTATE_SHM=0, or across hosts) may */
/* round differently, so fp16/bf16 bits may differ between the two paths (never between ranks). */
/* AVG on integer dtypes sums in the dtype (wrapping on overflow, as unsigned arithmetic does)  */
/* and then divides by the group size (toward zero): use a wider dtype when the sum can wrap.   */
/*                                                                                              */
/* Buffers: send and recv must not overlap except in the in-place forms each call names:       */
/* all_reduce send == recv; all_gather send == recv + rank_in_group * count, or (CPU) send ==  */
/* recv; reduce_scatter recv == send + rank_in_group * count, or (CPU) recv == send; gather on  */
/* root send == recv + root * count, or (CPU) send == recv; all_to_all (CPU) send == recv;      */
/* reduce on root send == recv; scatter on root recv == send + root * count,                    */
/* or (CPU) recv == send; all_gatherv send == recv + this rank's offset; reduce_scatterv recv == */
/* send + this rank's offset (offset = counts[0] + ... + counts[rank_in_group - 1] elements).   */
/* all_to_all_v has no in-place form (send, recv and every received part apart).              */
/* Any other overlap is INVALID_ARGUMENT naming both ranges and the forms                       */
/* (the check is local and costs two comparisons). In a CUDA context only NCCL's forms are      */
/* accepted. Rooted calls check only the buffers the rank uses: recv of reduce and send of      */
/* scatter are ignored (may be NULL) on the ranks other than root.                              */
/*                                                                                              */
/* Errors common to all: INVALID_ARGUMENT (NULL buffer with count > 0, bad dtype/op/rank,       */
/* overlapping buffers, a count too large), INVALID_STATE (a destroyed group), BUSY (another    */
/* thread is inside a call on the same pstate_t), UNSUPPORTED (reduction on fp8), TIMEOUT,      */
/* PEER_LOST, MISMATCH (ranks disagree about the call), ABORTED (an earlier failure).           */
/* An argument error on one rank fails the call on every rank of the group (none pairs it with  */
/* that rank's next call): the refusing rank (a root's bad recv or send, one rank's NULL or     */
/* overlapping buffer, its own dtype, count or stream) returns INVALID_ARGUMENT with its own    */
/* message, every other rank INVALID_ARGUMENT naming it, and the group stays in step and usable */
/* (the refusal takes part in the call's agreement; on the shared-memory path buffers the call  */
/* would have written may hold part of the data). In a CUDA context without PSTATE_CHECK=1 a    */
/* device collective's argument errors stay on the refusing rank, as NCCL's do (no host round   */
/* trip meets the peers there): the others' calls are enqueued and wait for it.                 */
/*                                                                                              */
/* Memory: in a CPU context every buffer is host memory (CUDA device memory is                  */
/* INVALID_ARGUMENT; pinned and managed memory are accepted); in a CUDA context every buffer is  */
/* device memory of the context's device, or managed memory (host memory or another device's    */
/* is INVALID_ARGUMENT, naming the buffer). In a CUDA context the first device operation on a    */
/* group creates its NCCL communicator, collectively over the group (a world or group of one     */
/* needs none): any device collective does, on every rank; point-to-point can only do         */
/* it in a group of two (INVALID_STATE otherwise, naming the fix). Fatal device errors           */
/* (TRANSPORT, PEER_LOST, TIMEOUT) fail the context like CPU ones.                              */
/* ------------------------------------------------------------------------------------------ */

/** recv[i] = op over ranks of send[i], count elements. send == recv is in place. */
PSTATE_API pstate_status_t pstate_all_reduce(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream);
/** send holds count elements; recv (world_size * count elements) = concatenation of every rank's
 *  send, in rank order. In place: send == recv + rank_in_group * count; in a CPU context also
 *  send == recv on every rank (pstate first copies the own block into place: one local copy of
 *  count elements, every path and size). */
PSTATE_API pstate_status_t pstate_all_gather(pstate_group_t *g, const void *send, void *recv, size_t count,
                                             pstate_dtype_t dtype, void *stream);
/** send holds world_size * count elements; rank r receives in recv (count elements) block r of
 *  the reduction. In place: recv == send + rank_in_group * count; in a CPU context also recv == send
 *  (pstate reduces into block rank_in_group of the buffer, then copies it to the front: that
 *  block is scratch, as the rest of send is in any in-place call). */
PSTATE_API pstate_status_t pstate_reduce_scatter(pstate_group_t *g, const void *send, void *recv, size_t count,
                                                 pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream);
/** buf (count elements) on rank `root` is copied into buf on every other rank. */
PSTATE_API pstate_status_t pstate_broadcast(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype,
                                            int root, void *stream);
/** send holds count elements; recv on rank `root` (world_size * count elements) = every rank's
 *  send in rank order; recv is ignored (may be NULL) on other ranks, but world_size * count must
 *  fit on every rank (INVALID_ARGUMENT everywhere otherwise). In place on root: send == recv +
 *  root * count; in a CPU context also send == recv. */
PSTATE_API pstate_status_t pstate_gather(pstate_group_t *g, const void *send, void *recv, size_t count,
                                         pstate_dtype_t dtype, int root, void *stream);
/** Block j of send (count elements) goes to rank j; block i of recv comes from rank i.
 *  In place (CPU contexts only): send == recv. */
PSTATE_API pstate_status_t pstate_all_to_all(pstate_group_t *g, const void *send, void *recv,
                                             size_t count, pstate_dtype_t dtype, void *stream);
/** recv on group rank `root` (count elements) = op over the ranks of send[i] (MPI_Reduce,
 *  ncclReduce, torch.distributed.reduce). recv is ignored on the other ranks: it may be NULL
 *  there and is never written. In place on root: send == recv. AVG divides by the group size,
 *  as all_reduce does; the notes on reductions above apply. */
PSTATE_API pstate_status_t pstate_reduce(pstate_group_t *g, const void *send, void *recv, size_t count,
                                         pstate_dtype_t dtype, pstate_reduce_op_t op, int root, void *stream);
/** send on group rank `root` holds world_size blocks of count elements; block r lands in recv
 *  (count elements) of group rank r, the root's own block included (MPI_Scatter, torch.distributed.scatter;
 *  in a CUDA context grouped ncclSend/ncclRecv, as vLLM's PyNccl does). send is ignored on the
 *  other ranks (it may be NULL there), but world_size * count must fit on every rank
 *  (INVALID_ARGUMENT everywhere otherwise, as for gather). In place on root: recv == send +
 *  root * count; in a CPU context also recv == send (pstate copies the root's block to the
 *  front once every other block has left; the rest of send is left as it was). */
PSTATE_API pstate_status_t pstate_scatter(pstate_group_t *g, const void *send, void *recv, size_t count,
                                          pstate_dtype_t dtype, int root, void *stream);
/** Variable counts (SGLang's all_gatherv with sizes=, MPI_Allgatherv): counts[i] = group rank
 *  i's element count (world_size entries, read during the call only; zeros are fine, all zeros
 *  too); send holds counts[rank_in_group] elements; recv (sum(counts) elements) receives every
 *  rank's part packed in group-rank order, part i at offset counts[0] + ... + counts[i-1].
 *  Every rank must pass the same counts: ranks whose arrays differ (their sum or any entry) get
 *  MISMATCH on every rank, naming both sides (CPU contexts: always; CUDA contexts: under
 *  PSTATE_CHECK=1). counts NULL, a sum that overflows size_t, or a sum of more than 2^47 bytes is
 *  INVALID_ARGUMENT. In place: send == recv + counts[0] + ... + counts[rank_in_group - 1]
 *  elements (this rank's part already in recv). CPU: a ring over the CPU communicator; CUDA: one
 *  NCCL group of an ncclBroadcast from every rank with a non-empty part (as SGLang's PyNccl). */
PSTATE_API pstate_status_t pstate_all_gatherv(pstate_group_t *g, const void *send, void *recv, const size_t *counts,
                                              pstate_dtype_t dtype, void *stream);
/** Variable counts (SGLang's reduce_scatterv with sizes=, MPI_Reduce_scatter): send holds
 *  sum(counts) elements; group rank i receives in recv counts[i] elements: the reduction over the
 *  group of the part at offset counts[0] + ... + counts[i-1]. counts, agreement and errors as for
 *  pstate_all_gatherv; the notes on reductions above apply (AVG divides by the group size). A
 *  rank whose count is 0 may pass recv NULL. In place: recv == send + counts[0] + ... +
 *  counts[rank_in_group - 1] elements (only that part of send is written).
 *  CPU: a ring over the CPU communicator; CUDA: one NCCL group of an ncclReduce to every rank
 *  with a non-empty part (as SGLang's PyNccl). */
PSTATE_API pstate_status_t pstate_reduce_scatterv(pstate_group_t *g, const void *send, void *recv,
                                                  const size_t *counts, pstate_dtype_t dtype, pstate_reduce_op_t op,
                                                  void *stream);
/** Variable all-to-all (MPI_Alltoallv; torchcomms' all_to_all_v_single, MoE dispatch): group rank
 *  i sends send_counts[j] elements from send + send_displs[j] to group rank j, and receives
 *  recv_counts[j] elements from group rank j into recv + recv_displs[j] (displacements and counts
 *  in elements; the four arrays hold world_size entries each, read during the call only; zeros
 *  are fine, and a rank's own entry is a local copy). Displacements may come in any order and
 *  leave gaps (what lies in a gap of recv is not written); the received ranges must not overlap
 *  one another. Every pair must agree: my send_counts[j] == group rank j's recv_counts[me],
 *  else MISMATCH on every rank of the call, naming the pair and both counts (CPU contexts: always,
 *  with one more small exchange of every rank's counts before any data moves, which leaves the
 *  context usable; CUDA contexts: under PSTATE_CHECK=1, like every device collective). An array
 *  that is NULL, a displacement + count that overflows or passes 2^47 bytes, or a send/recv range
 *  that overlaps the other buffer's is INVALID_ARGUMENT (on every rank of the call: it refuses
 *  together). No in-place form. send may be NULL where every send count is 0, recv where every
 *  recv count is 0. CPU: pairwise exchange over the CPU communicator (step s: send to rank + s,
 *  receive from rank - s; empty messages skipped by both ends); CUDA: one NCCL group of
 *  ncclSend/ncclRecv per non-empty pair (capturable). */
PSTATE_API pstate_status_t pstate_all_to_all_v(pstate_group_t *g, const void *send, const size_t *send_counts,
                                               const size_t *send_displs, void *recv, const size_t *recv_counts,
                                               const size_t *recv_displs, pstate_dtype_t dtype, void *stream);
/** Sends count elements to group rank peer (returns when the buffer may be reused: the message has
 *  left, as in MPI and NCCL). Point-to-point of a group is two ordered streams per peer and
 *  direction: tensors (send, recv, isend, irecv, p2p_batch, the CPU payload of tensor dicts) and
 *  objects (send_object, recv_object, the metadata of tensor dicts); the k-th send of a stream is
 *  the peer's k-th receive of that stream. Each message carries its kind, dtype and size. */
PSTATE_API pstate_status_t pstate_send(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype,
                                       int peer, void *stream);
/** Receives exactly count elements of dtype from group rank peer. A message of another size,
 *  dtype or kind (a tensor dict's payload) is MISMATCH naming both sides: the stream is out of
 *  step, so the context fails, and the sender's next call returns the same error (a failure
 *  notice). In a CUDA context the transfer is NCCL's, compared first only under PSTATE_CHECK=1. */
PSTATE_API pstate_status_t pstate_recv(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype,
                                       int peer, void *stream);
/** Returns on each rank once every rank of the group has entered it. It always runs on the CPU
 *  communicator, as SGLang's GroupCoordinator.barrier does (an NCCL barrier is a broadcast with
 *  a hidden device tensor): in a CUDA context it neither waits for nor enqueues device work. */
PSTATE_API pstate_status_t pstate_barrier(pstate_group_t *g);

/** communication_op.py tensor_model_parallel_all_reduce: in-place all_reduce on the TP group. */
PSTATE_API pstate_status_t pstate_tp_allreduce(pstate_t *ps, void *buf, size_t count, pstate_dtype_t dtype,
                                               pstate_reduce_op_t op, void *stream);
/** communication_op.py tensor_model_parallel_all_gather on the TP group. */
PSTATE_API pstate_status_t pstate_tp_allgather(pstate_t *ps, const void *send, void *recv, size_t count,
                                               pstate_dtype_t dtype, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Objects: variable-length bytes over the CPU communicator, sizes not agreed in advance        */
/* (SGLang's pickled-object operations; serialize on your side, pass bytes)                      */
/* ------------------------------------------------------------------------------------------ */

/** Rank root sends size bytes of data; every other rank receives them into *out (allocated by
 *  pstate, free with pstate_bytes_free). On root, data is read and out may be NULL (when given,
 *  it receives a copy). A size over 2^47 bytes (or NULL data with size > 0) is INVALID_ARGUMENT
 *  on root, and root still takes part in the call's agreement as a refusal: the other ranks return
 *  INVALID_ARGUMENT naming root at once, nothing is sent, and the group stays usable. */
PSTATE_API pstate_status_t pstate_broadcast_object(pstate_group_t *g, const void *data, size_t size, int root,
                                                   pstate_bytes_t *out);
/** Every rank contributes size bytes; *out = the concatenation in group-rank order, and sizes is
 *  a returned array: sizes[i] = rank i's size (*count = the group size). A rank whose size is
 *  over 2^47 bytes, or whose capacity is smaller than the group size, refuses its part as
 *  pstate_broadcast_object's root does: INVALID_ARGUMENT on every rank at once (that rank's
 *  *count still says the group size), nothing moves and the group stays usable. */
PSTATE_API pstate_status_t pstate_all_gather_object(pstate_group_t *g, const void *data, size_t size,
                                                    pstate_bytes_t *out, size_t *sizes, size_t capacity,
                                                    size_t *count);
/** Sends size bytes to group rank peer on the object stream (see pstate_send); the receiver
 *  learns the size. */
PSTATE_API pstate_status_t pstate_send_object(pstate_group_t *g, const void *data, size_t size, int peer);
/** Receives the next object from group rank peer into *out (free with pstate_bytes_free); a
 *  tensor dict's metadata in its place is MISMATCH (as for pstate_recv). */
PSTATE_API pstate_status_t pstate_recv_object(pstate_group_t *g, int peer, pstate_bytes_t *out);
/** Frees what an object call put in *b and sets it to {NULL, 0}; NULL is a no-op. */
PSTATE_API void pstate_bytes_free(pstate_bytes_t *b);

/* ------------------------------------------------------------------------------------------ */
/* Tensor dicts (SGLang's broadcast_tensor_dict / send_tensor_dict / recv_tensor_dict)          */
/*                                                                                              */
/* A dict is an array of named tensors. The metadata (names, dtypes, shapes, devices) travels   */
/* over the CPU communicator with the payload of small CPU tensors; large CPU tensors follow on  */
/* the CPU communicator, CUDA tensors on the device communicator (NCCL, enqueued on `stream`).   */
/* Receivers do not know the dict in advance: for each tensor, in dict order, pstate calls the   */
/* caller's allocation callback, which returns the memory to receive it into.                   */
/* ------------------------------------------------------------------------------------------ */

/** Most dimensions of one tensor of a dict. */
#define PSTATE_TENSOR_MAX_NDIM 64

/** One tensor of a dict, as the sender describes it. Fill from PSTATE_TENSOR_INIT, then set the
 *  fields. A dict is an array of them, walked by struct_size (the struct-array rule above). Its
 *  1.0 size ends with `device` (44 bytes on LP64, 4 short of sizeof: tail padding, which a field
 *  added later must not use; docs/abi.md). */
typedef struct pstate_tensor_t {
  size_t struct_size;     /**< sizeof(pstate_tensor_t); set by PSTATE_TENSOR_INIT */
  const char *name;       /**< the key: NUL-terminated, not NULL, unique within the dict */
  pstate_dtype_t dtype;   /**< element type */
  int ndim;               /**< 0..PSTATE_TENSOR_MAX_NDIM; 0 is a scalar (one element) */
  const int64_t *shape;   /**< ndim extents, each >= 0; may be NULL when ndim is 0 */
  const void *data;       /**< the elements, contiguous, row-major; may be NULL when empty */
  pstate_device_t device; /**< CPU: host memory; CUDA: device memory of the context's device
                               (CUDA contexts only) */
} pstate_tensor_t;

#define PSTATE_TENSOR_INIT { sizeof(pstate_tensor_t), NULL, PSTATE_FLOAT32, 0, NULL, NULL, PSTATE_DEVICE_CPU }

/** Allocation callback of the receiving side: returns memory for one received tensor of `bytes`
 *  bytes on `device` (CPU: host memory; CUDA: device memory of the context's device, usable in
 *  stream order on the call's stream), or NULL when it cannot (NULL is also fine when bytes is
 *  0). The memory belongs to the caller, before and after the call, also on error (its contents
 *  are then unspecified). name and shape are valid only during the callback: copy them. It is
 *  called on the calling thread, during the call, once per tensor in dict order, and must not
 *  call pstate on the same context. `user` is the pointer given to the receiving call. */
typedef void *(*pstate_alloc_fn)(void *user, const char *name, pstate_dtype_t dtype, int ndim, const int64_t *shape,
                                 size_t bytes, pstate_device_t device);

/** Rank root sends its dict (count tensors at `tensors`) to every other rank of the group; the
 *  others receive each tensor into memory from alloc(user, ...), which root never calls. tensors
 *  and count are read on root only (others may pass NULL, 0); alloc is used on the others only (root
 *  may pass NULL). Collective over the group; count 0 is an empty dict.
 *  CPU contexts return when the dict is complete; CUDA contexts return when the CUDA tensors are
 *  enqueued on stream (NULL: the context stream) and the CPU tensors are complete.
 *  Errors: INVALID_ARGUMENT on root for a bad dict (a struct_size, NULL name, duplicate name, bad dtype, ndim,
 *  shape, size overflow, a buffer in the wrong memory, a CUDA tensor in a CPU context): the
 *  other ranks then fail too, with root's message, instead of waiting. NO_MEMORY when alloc
 *  returned NULL: for CPU tensors on that rank only (the rest of the dict still moves, no
 *  further alloc calls are made); when the dict holds CUDA tensors, on every rank and nothing is
 *  transferred (the ranks agree on it over the CPU communicator before the device transfer,
 *  one small exchange per call). Plus the errors of the collectives. */
PSTATE_API pstate_status_t pstate_broadcast_tensor_dict(pstate_group_t *g, const pstate_tensor_t *tensors,
                                                        size_t count, int root, pstate_alloc_fn alloc, void *user,
                                                        void *stream);
/** Sends a dict to group rank peer, which receives it with pstate_recv_tensor_dict. May wait for
 *  the receiver (always when the dict holds a CUDA tensor: the receiver confirms its memory
 *  first). Errors as for the broadcast; a dict refused here fails the receiver too. */
PSTATE_API pstate_status_t pstate_send_tensor_dict(pstate_group_t *g, const pstate_tensor_t *tensors, size_t count,
                                                   int peer, void *stream);
/** Receives the next dict from group rank peer, each tensor into memory from alloc(user, ...). */
PSTATE_API pstate_status_t pstate_recv_tensor_dict(pstate_group_t *g, int peer, pstate_alloc_fn alloc, void *user,
                                                   void *stream);

/** all_gather_group (SGLang, vLLM): pipeline activations that every rank of an attention-TP group
 *  holds are sent as slices. On the sender, a tensor whose element count divides by the size S of
 *  ag (S > 1) is sent as this rank's 1/S slice (the elements at rank_in_group(ag) * count / S);
 *  others go whole. On the receiver, alloc is asked for every tensor at its FULL shape and size,
 *  the slice lands at this rank's place in it, and the slices are all-gathered over the receiver's
 *  ag (CPU tensors on its CPU communicator; CUDA tensors on its device communicator, enqueued on
 *  stream), so every rank of the receiving ag ends with the whole tensor. Pair each sender with
 *  the receiver at the same rank of an ag of the same size (else MISMATCH on that receiver and
 *  nothing gathered); the receive is collective over ag (every rank of the receiving ag calls it,
 *  each from its own sender), and when one rank of ag fails to receive, every rank of ag returns
 *  an error (that one its own, the others ABORTED naming ag) and nothing is gathered. ag must be a
 *  group of g's context (INVALID_ARGUMENT otherwise). Otherwise as pstate_send_tensor_dict and
 *  pstate_recv_tensor_dict; one more small object message per dict (the slicing plan). */
PSTATE_API pstate_status_t pstate_send_tensor_dict_sliced(pstate_group_t *g, const pstate_tensor_t *tensors,
                                                          size_t count, int peer, pstate_group_t *ag, void *stream);
PSTATE_API pstate_status_t pstate_recv_tensor_dict_sliced(pstate_group_t *g, int peer, pstate_group_t *ag,
                                                          pstate_alloc_fn alloc, void *user, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Non-blocking and batched point-to-point (SGLang's P2PWork, vLLM's isend/irecv, torch's        */
/* batch_isend_irecv)                                                                           */
/* ------------------------------------------------------------------------------------------ */

/** One pending point-to-point operation, made by pstate_isend / pstate_irecv and freed by the
 *  pstate_wait or pstate_test that completes it (never free it otherwise).
 *
 *  Handles: opaque values, not the address of any object (never dereference one). A handle is
 *  not handed out again while the process lives (not before 2^40 more requests; fewer, down to
 *  2^16, where little address space can be reserved: a low ulimit -v, some sanitizers), so one
 *  that a wait/test has freed stays refused and never names a later request.
 *
 *  Buffers: the buffer of a pending request belongs to pstate until that wait/test completes it
 *  (do not read a receive buffer or write a send buffer before).
 *  Order: isend/irecv take the same per-peer sequence as pstate_send/pstate_recv, so blocking and
 *  non-blocking calls between two ranks can be mixed: the k-th send (of any kind) from a to b
 *  matches b's k-th receive (of any kind) from a. Several requests may be pending on one group,
 *  and any other operation (a collective, blocking p2p, another request's wait) may run on the
 *  group meanwhile; none cancels a pending request, and the transfer moves whenever pstate drives
 *  the CPU transport (this request's wait or test, another point-to-point call of the group, or
 *  any other call that waits: on UCX, or in the group's shared memory).
 *  Failure: a request that cannot complete fails its wait with TIMEOUT (the group's timeout:
 *  its own, pstate_group_set_timeout, or the context's; counted from the pstate_wait call;
 *  pstate_test never blocks and reports TIMEOUT once the timeout has passed since the request
 *  was posted) or PEER_LOST (its peer died), never hangs;
 *  such a fatal error fails the context as a blocking call does. While the context is failed,
 *  completing a request that has not finished yet returns ABORTED (the transfer is cancelled).
 *  Teardown: requests still pending at pstate_finalize or pstate_abort are cancelled there:
 *  pstate stops using their buffers before that call returns, and the request stays valid (it
 *  does not point into the freed context): pstate_wait / pstate_test on it later returns ABORTED
 *  and frees it. pstate_destroy_model_parallel refuses (INVALID_STATE, nothing destroyed) while a
 *  model-parallel group has a pending request: complete it first. A request that is never
 *  completed is leaked (a few dozen bytes).
 *  Threads: the request is driven under its context's thread rules (one thread at a time per
 *  pstate_t, including wait/test; after finalize/abort any thread may complete it). */
typedef struct pstate_request_s pstate_request_t;
/** Posts a send of count elements to group rank peer (not this rank) and returns at once with
 *  *req. CPU contexts: the transfer runs in the background of later pstate calls on the context
 *  (and of this request's wait/test). CUDA contexts: ncclSend is enqueued on the stream before
 *  the call returns, and *req is already complete (its wait returns OK at once), as torch's Work
 *  on NCCL; the stream orders the buffer's use. count 0 is legal (a zero-byte message on CPU).
 *  Errors return no request (*req = NULL): INVALID_ARGUMENT for a NULL req, bad peer, dtype,
 *  buffer or stream; the errors of pstate_send. */
PSTATE_API pstate_status_t pstate_isend(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype,
                                        int peer, void *stream, pstate_request_t **req);
/** Posts a receive of exactly count elements from group rank peer (not this rank); as
 *  pstate_isend. A message of another size fails the wait with MISMATCH. */
PSTATE_API pstate_status_t pstate_irecv(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int peer,
                                        void *stream, pstate_request_t **req);
/** Waits until req completes (at most the group's timeout from now), frees it and returns the
 *  operation's status (pstate_last_error() says why it failed). After finalize/abort: ABORTED
 *  (freed). req NULL or not a live request (freed by an earlier pstate_wait / pstate_test, never
 *  made by pstate_isend / pstate_irecv, any other pointer): INVALID_ARGUMENT, and nothing is read
 *  or freed: pstate checks the handle before it touches anything, so no other request is ever
 *  completed in its place. Another thread inside a call on the context, or on req itself:
 *  PSTATE_ERR_BUSY, nothing freed. */
PSTATE_API pstate_status_t pstate_wait(pstate_request_t *req);
/** Never blocks: progresses the transport once, then *done = 1 when req completed (it is freed and
 *  the return value is the operation's status), or *done = 0 and PSTATE_OK while it is pending
 *  (req stays valid). Errors of the call itself (NULL req or done, busy context or request) leave
 *  *done = 0 and req valid; req not a live request: INVALID_ARGUMENT, *done = 0, nothing read or
 *  freed, as pstate_wait. */
PSTATE_API pstate_status_t pstate_test(pstate_request_t *req, int *done);

/** One send or receive of a pstate_p2p_batch (whose ops array is walked by struct_size, the
 *  struct-array rule at the top). Fill from PSTATE_P2P_OP_INIT, then set is_send
 *  (nonzero: send buf to peer; 0: receive exactly count elements from peer into buf), buf,
 *  count, dtype and peer (a group rank other than this one). */
typedef struct pstate_p2p_op_t {
  size_t struct_size; /**< sizeof(pstate_p2p_op_t); set by PSTATE_P2P_OP_INIT */
  int is_send;
  void *buf;          /**< a send only reads it */
  size_t count;
  pstate_dtype_t dtype;
  int peer;           /**< group rank */
} pstate_p2p_op_t;
#define PSTATE_P2P_OP_INIT { sizeof(pstate_p2p_op_t), 0, NULL, 0, PSTATE_FLOAT32, -1 }
/** Runs n sends and receives with any peers as one batch: every op of the batch completes (CPU:
 *  all are posted, then waited for together under one deadline, so no listing order can
 *  deadlock) or is enqueued (CUDA: one NCCL group, ncclGroupStart/End), whatever the order of
 *  ops on each rank. Sends to one peer match that peer's receives from this rank in list order
 *  (and in order with blocking and non-blocking p2p). Every op is checked before anything moves:
 *  INVALID_ARGUMENT naming the op's index for a bad or differing struct_size, peer, dtype, count or buf. n 0 is
 *  a no-op (ops may then be NULL). Errors otherwise as pstate_send/pstate_recv.
 *  Such a refusal is local, as pstate_send's and pstate_recv's are: nothing of the batch moves and
 *  the context goes on, but the peers are not told. A peer whose matching send or receive was in
 *  the refused batch waits for it until its timeout (TIMEOUT, which fails its context, and its
 *  notice then fails this one). Point-to-point takes part in no agreement (a batch's ops pair
 *  with the peer's send, recv, isend, irecv or batch alike, and two ranks that refuse the same
 *  batch stay in step), so the refusal has no call of the peer's to travel in: check a batch's
 *  arguments alike on both sides of every pair. */
PSTATE_API pstate_status_t pstate_p2p_batch(pstate_group_t *g, const pstate_p2p_op_t *ops, size_t n, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Graph capture (SGLang's graph_capture())                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Puts every group of ps in capture mode. CUDA contexts only: CPU contexts return UNSUPPORTED.
 *  *capture_stream receives the stream to capture on (stream itself, or when NULL a stream made
 *  by pstate that waits on the context's stream; it is owned by ps and lives until
 *  pstate_finalize/abort). Collective over the world: it first creates the NCCL communicator of
 *  every group that has none (a stream capture cannot), so call it on every rank, before
 *  cudaStreamBeginCapture. While capturing, tensor operations with stream NULL go to the capture
 *  stream and a stream outside the capture is INVALID_STATE; pstate_barrier still runs (on the
 *  CPU communicator: it waits on the host and records nothing into the graph). The caller
 *  records the graph itself (cudaStreamBeginCapture ... EndCapture on *capture_stream, inside
 *  begin/end). INVALID_STATE when already capturing. */
PSTATE_API pstate_status_t pstate_graph_capture_begin(pstate_t *ps, void *stream, void **capture_stream);
/** Leaves capture mode; later work on the context stream is ordered after the capture stream's.
 *  INVALID_STATE when not capturing, or while the capture stream still records a CUDA graph (end
 *  that capture first); UNSUPPORTED on CPU contexts. */
PSTATE_API pstate_status_t pstate_graph_capture_end(pstate_t *ps);

/* ------------------------------------------------------------------------------------------ */
/* Group memory and registered buffers (NCCL symmetric memory; CUDA contexts)                   */
/*                                                                                              */
/* SGLang's use_symmetric_memory(group) / pynccl allocator and vLLM's VLLM_USE_NCCL_SYMM_MEM:   */
/* device memory that NCCL (>= 2.27) registers as a symmetric window (ncclMemAlloc +            */
/* ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC) on the group's communicator, so that     */
/* all_reduce, all_gather and reduce_scatter whose send and recv both lie in it run NCCL's        */
/* symmetric kernels (the small-message fast path). Fallback: in a group of one rank, with an    */
/* NCCL older than 2.27, or when NCCL refuses the window on any rank (no NVLink, no address      */
/* space left), the memory is plain device memory (ncclMemAlloc, else cudaMalloc) and every call */
/* works the same, only without the fast path; pstate says so once per group at INFO, and       */
/* pstate_group_mem_stats tells (symmetric_available 0). Each allocation is registered once per  */
/* communicator (never twice: nccl #2331); pstate_shrink carries the world group's memory, pool  */
/* included, to the new world group and registers it on the shrunk communicator. CUDA graphs:   */
/* NCCL before 2.30.7 gave silently wrong results for symmetric memory in captured graphs       */
/* (sglang #37768): there a device collective on symmetric memory while capturing is            */
/* UNSUPPORTED (capture it with plain buffers, or use NCCL >= 2.30.7). NCCL 2.29.2 may register */
/* silently without effect where GPU-initiated networking is unsupported (nccl #1963): the       */
/* results stay right, only the speed-up is missing. CPU contexts: every call here is           */
/* UNSUPPORTED. Memory lives until pstate_mem_free, or until the group is destroyed             */
/* (pstate_destroy_model_parallel and pstate_finalize free it; groups dropped by pstate_abort,   */
/* pstate_grow or, model-parallel ones, pstate_shrink leave it to the process): never use it    */
/* after.                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/** What holds a pointer (pstate_mem_query). */
typedef enum pstate_mem_kind_t PSTATE_ENUM_BASE {
  PSTATE_MEM_NONE = 0,      /**< nothing of pstate's: plain memory of the caller */
  PSTATE_MEM_GROUP = 1,     /**< a collective allocation of pstate_mem_alloc (or the pool's reserve) */
  PSTATE_MEM_POOL = 2,      /**< a local allocation from the group's pool (pstate_mem_pool_reserve) */
  PSTATE_MEM_REGISTERED = 3 /**< a buffer registered by pstate_mem_register or at graph capture end */
} pstate_mem_kind_t;

/** Which memory path a device collective took (pstate_mem_stats_t.last_path). */
typedef enum pstate_mem_path_t PSTATE_ENUM_BASE {
  PSTATE_MEM_PATH_NONE = 0,       /**< no device all_reduce/all_gather/reduce_scatter yet */
  PSTATE_MEM_PATH_PLAIN = 1,      /**< a buffer outside registered memory: NCCL's ordinary path */
  PSTATE_MEM_PATH_REGISTERED = 2, /**< both buffers registered (ncclCommRegister or a window): zero-copy */
  PSTATE_MEM_PATH_SYMMETRIC = 3   /**< both buffers in symmetric windows: NCCL's symmetric kernels */
} pstate_mem_path_t;

/** Answer of pstate_mem_query (an out struct: fill from PSTATE_MEM_INFO_INIT first). */
typedef struct pstate_mem_info_t {
  size_t struct_size;
  void *base;              /**< start of the allocation, pool piece or registration holding the pointer; NULL for NONE */
  size_t size;             /**< its bytes; 0 for NONE */
  pstate_mem_kind_t kind;
  int symmetric;           /**< 1: inside a symmetric window of the group's current NCCL communicator */
  int registered;          /**< 1: registered with it (a window, or ncclCommRegister) */
  int reserved0;           /**< 0 */
} pstate_mem_info_t;
#define PSTATE_MEM_INFO_INIT { sizeof(pstate_mem_info_t), NULL, 0, PSTATE_MEM_NONE, 0, 0, 0 }

/** Answer of pstate_group_mem_stats (an out struct: fill from PSTATE_MEM_STATS_INIT first). The
 *  counts cover this rank's device all_reduce, all_gather and reduce_scatter on the group. */
typedef struct pstate_mem_stats_t {
  size_t struct_size;
  uint64_t symmetric_calls;  /**< calls that took PSTATE_MEM_PATH_SYMMETRIC */
  uint64_t registered_calls; /**< calls that took PSTATE_MEM_PATH_REGISTERED */
  uint64_t plain_calls;      /**< calls that took PSTATE_MEM_PATH_PLAIN */
  size_t windows;            /**< live symmetric windows of the group (one per collective allocation) */
  size_t registrations;      /**< live ncclCommRegister registrations */
  size_t allocated;          /**< bytes of collective allocations, the reserve included */
  size_t pool_reserved;      /**< bytes of the reserve (0: none) */
  size_t pool_used;          /**< bytes of it in local allocations */
  int symmetric_available;   /**< 1 when the group's memory gets symmetric windows; 0: fallback (INFO says why) */
  pstate_mem_path_t last_path; /**< the path of the last such call */
  int nccl_version;          /**< NCCL_VERSION_CODE of the loaded NCCL (22809); 0 when none is loaded */
  int reserved0;             /**< 0 */
} pstate_mem_stats_t;
#define PSTATE_MEM_STATS_INIT { sizeof(pstate_mem_stats_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, PSTATE_MEM_PATH_NONE, 0, 0 }

/** Allocates bytes (> 0) of device memory for group g and returns it in *out (256-byte aligned).
 *  Without a pool (pstate_mem_pool_reserve): collective over the group, like NCCL's window
 *  registration: every rank calls it with the same bytes; ranks that disagree get MISMATCH on
 *  every rank, naming both sizes, and nothing is allocated. A rank whose arguments are refused
 *  (bytes 0 or past 2^47, out NULL) still takes part in the call: INVALID_ARGUMENT on every rank
 *  (the others name that rank), nothing allocated, the group goes on. The memory comes from
 *  ncclMemAlloc and is registered as a symmetric window on the group's NCCL communicator (made
 *  now if needed), or is plain device memory (see the section's fallback). NO_MEMORY on every rank
 *  when any rank could not allocate. With a pool: local, never communicates: a piece of the
 *  reserve, NO_MEMORY naming the reserve when it does not fit, INVALID_ARGUMENT for refused
 *  arguments on this rank only. INVALID_STATE while capturing a graph (collective form), or on a
 *  destroyed group; UNSUPPORTED in a CPU context (every call, on every rank; refused arguments
 *  are INVALID_ARGUMENT there first). */
PSTATE_API pstate_status_t pstate_mem_alloc(pstate_group_t *g, size_t bytes, void **out);
/** Frees what pstate_mem_alloc returned. A pool piece (the first one too, which starts at the
 *  reserve's own address): local, only that piece; the reserve itself is freed with the group. A
 *  collective allocation: collective over the group (every rank frees its allocation of the same
 *  call; ranks that free allocations of other sizes or of other calls get MISMATCH on every rank,
 *  nothing freed), its window deregistered first. Work enqueued on streams that still uses it
 *  must have completed (as for cudaFree). ptr NULL is a no-op (local: pass NULL on every rank or
 *  on none). A pointer that is not the start of a live allocation is INVALID_ARGUMENT: inside
 *  the pool, on this rank only; elsewhere (the others are in the collective form of the call) on
 *  every rank of the group, the others naming this rank, nothing freed, the group going on. */
PSTATE_API pstate_status_t pstate_mem_free(pstate_group_t *g, void *ptr);
/** Reserves bytes (> 0) of group memory up front as the group's pool: collective as
 *  pstate_mem_alloc (MISMATCH when ranks disagree; bytes 0 or past 2^47 on one rank:
 *  INVALID_ARGUMENT on every rank), one symmetric window for all of it. Every
 *  later pstate_mem_alloc on g is local (a piece of it) and never communicates: growing memory
 *  at run time on some ranks only cannot deadlock (sglang #36943). Once per group: a second call
 *  is INVALID_STATE. The pool survives pstate_shrink (with the world group). */
PSTATE_API pstate_status_t pstate_mem_pool_reserve(pstate_group_t *g, size_t bytes);
/** Registers the caller's device buffer [ptr, ptr + bytes) with the group's NCCL communicator
 *  (ncclCommRegister: zero-copy collectives, and captured graphs). Local, never communicates;
 *  applied when the communicator exists (now, or at its creation). A range inside group memory or
 *  inside an earlier registration is counted and not registered again (deregister it as often);
 *  a range that partly overlaps one is INVALID_ARGUMENT. ptr must be device memory of the
 *  context's device. Registrations end at pstate_mem_deregister or when the group is destroyed;
 *  keep the buffer allocated while registered. A group of one, or an NCCL that refuses: the call
 *  succeeds and the buffer stays unregistered (pstate_mem_query says so; INFO once). */
PSTATE_API pstate_status_t pstate_mem_register(pstate_group_t *g, void *ptr, size_t bytes);
/** Drops one registration made at ptr (pstate_mem_register's ptr, or a captured buffer's start);
 *  the last one deregisters (ncclCommDeregister). Local. INVALID_ARGUMENT when none is there. */
PSTATE_API pstate_status_t pstate_mem_deregister(pstate_group_t *g, void *ptr);
/** Says what holds ptr for group g (kind, base, size) and whether it is registered or in a
 *  symmetric window of the group's current communicator. Local. */
PSTATE_API pstate_status_t pstate_mem_query(pstate_group_t *g, const void *ptr, pstate_mem_info_t *out);
/** This rank's facts about the group's memory: windows, registrations, pool, and which path its
 *  device collectives took (last_path and counts). Local. */
PSTATE_API pstate_status_t pstate_group_mem_stats(pstate_group_t *g, pstate_mem_stats_t *out);
/** enable nonzero: from the next pstate_graph_capture_end on, every buffer of the device
 *  all_reduce/all_gather/reduce_scatter calls captured since pstate_graph_capture_begin is
 *  registered with its group's communicator (ncclCommRegister, local, as SGLang's graph_capture
 *  registers graph buffers), each range once (ranges that overlap are merged, ranges already in
 *  group memory or registered are skipped). The registrations last until pstate_mem_deregister
 *  (at the range's start, pstate_mem_query's base) or until the group is destroyed: keep the
 *  graph's buffers allocated as long. 0 (the default): nothing is registered. Local. */
PSTATE_API pstate_status_t pstate_set_graph_registration(pstate_t *ps, int enable);

/* ------------------------------------------------------------------------------------------ */
/* Metrics (docs/metrics.md)                                                                    */
/* ------------------------------------------------------------------------------------------ */

/** This rank's metrics in the Prometheus text exposition format (version 0.0.4), always kept:
 *  per group and operation the calls by path and status, their bytes and a latency histogram;
 *  per context its lifecycle steps, rendezvous time, world generation and size, failures and
 *  failure notices. docs/metrics.md lists every metric and label. The returned-array convention
 *  with T = char: *count is set to the text's length plus its terminating NUL; out (capacity
 *  chars) receives the text and the NUL when capacity >= *count, else INVALID_ARGUMENT with
 *  nothing written (ask with out NULL and capacity 0 first; the text may grow between the two
 *  calls: ask with some room to spare, or again). Local, never blocks on peers, and may be called
 *  from any thread, also while another thread is inside a call on ps (a scraper thread's use). */
PSTATE_API pstate_status_t pstate_metrics_text(pstate_t *ps, char *out, size_t capacity, size_t *count);

/* ------------------------------------------------------------------------------------------ */
/* Hooks around every call (docs/hooks.md)                                                      */
/* ------------------------------------------------------------------------------------------ */

/** When a hook is called: before a call of a group begins, after it returned (with its status and
 *  duration), or once per context when it fails or is aborted. Values are never renumbered. */
typedef enum pstate_hook_phase_t PSTATE_ENUM_BASE {
  PSTATE_HOOK_BEFORE = 0,
  PSTATE_HOOK_AFTER = 1,
  PSTATE_HOOK_ABORT = 2
} pstate_hook_phase_t;

/** What a hook is told (extensible: later fields are appended; read only those below struct_size).
 *  Strings and buffers are valid during the hook only. */
typedef struct pstate_call_info_t {
  size_t struct_size;         /**< sizeof the struct the library filled */
  pstate_hook_phase_t phase;  /**< BEFORE, AFTER or ABORT */
  pstate_status_t status;     /**< AFTER: what the call returns; ABORT: the failure's; BEFORE: OK */
  uint64_t call_id;           /**< this context's calls numbered from 1 in the order they began;
                                   BEFORE and AFTER of one call carry the same; 0 in ABORT */
  const char *group;          /**< the group's name ("tp:0", pstate_group_info's); "" in ABORT */
  const char *operation;      /**< "all_reduce", "send", "broadcast_tensor_dict", ...; in ABORT the
                                   call that failed the context, "pstate_revoke" or "pstate_abort" */
  uint64_t seq;               /**< the group's number of a collective (the flight recorder's seq),
                                   UINT64_MAX for point-to-point and ABORT */
  uint64_t count;             /**< the call's count argument (elements; bytes for objects) */
  int32_t dtype;              /**< pstate_dtype_t, or -1 (objects, barrier, tensor dicts) */
  int32_t root;               /**< group rank of a rooted call, else -1 */
  int32_t peer;               /**< group rank of the other side of a point-to-point call, else -1 */
  int32_t on_device;          /**< 1: the buffers are device memory (a CUDA context's tensor call) */
  uint64_t bytes;             /**< count times the dtype's size (objects: their bytes) */
  const char *path;           /**< what carries it: "shm", "ucx", "nccl", "local" or "none" */
  int64_t duration_ns;        /**< AFTER: from BEFORE to the return (a device call: to the enqueue) */
  const void *send;           /**< BEFORE and AFTER: the data this rank sends (all_reduce's send, a
                                   root's broadcast buffer, send's buf), NULL where the call has none */
  uint64_t send_bytes;        /**< the bytes at send */
  const char *message;        /**< AFTER of a failed call and ABORT: the error's text, else NULL */
} pstate_call_info_t;

/** A hook: called on the thread that makes the call (ABORT: the thread that fails or aborts the
 *  context, which may be a watchdog's). In BEFORE a nonzero return refuses the call: it returns
 *  PSTATE_ERR_INVALID_ARGUMENT without moving data, and a collective of a CPU group is refused on
 *  every rank (each returns INVALID_ARGUMENT naming this rank, the group goes on: the refusal
 *  takes part in the call's agreement, as an argument error does); a point-to-point call and a
 *  device collective without PSTATE_CHECK=1 are refused on this rank only. The return is ignored
 *  in AFTER and ABORT. A hook may read info and call pstate_metrics_text, pstate_trace_dump and
 *  pstate_group_info/ranks; any other call on this context returns PSTATE_ERR_BUSY (the call it
 *  hooks holds the context), and it should return quickly (it runs inside the call's time). */
typedef pstate_status_t (*pstate_hook_fn)(void *user, const pstate_call_info_t *info);

/** Adds fn(user, info) to the hooks of ps; *id names it for pstate_remove_hook (nonzero). Hooks run
 *  in the order they were added, for every call of every group of ps that reaches the group
 *  (after the argument checks: a call refused by them is not hooked), from the next call on
 *  (pstate_isend/irecv: BEFORE at the post, AFTER where the request completes or is aborted);
 *  pstate keeps fn and user until the hook is removed or the context ends. Local, not collective:
 *  ranks may hook differently (a BEFORE refusal still reaches the peers). PSTATE_NAN_CHECK=1 adds
 *  pstate's own NaN/Inf check as the first hook at pstate_init (docs/hooks.md). */
PSTATE_API pstate_status_t pstate_add_hook(pstate_t *ps, pstate_hook_fn fn, void *user, uint64_t *id);
/** Removes the hook `id` (INVALID_ARGUMENT naming the id when ps has no such hook). */
PSTATE_API pstate_status_t pstate_remove_hook(pstate_t *ps, uint64_t id);

/* ------------------------------------------------------------------------------------------ */
/* The function table for dlopen users                                                          */
/* ------------------------------------------------------------------------------------------ */

typedef struct pstate_api_t pstate_api_t;
/** Every exported entry point, for dlopen users: one dlsym of pstate_get_api. Member `x` is
 *  pstate_x. The table belongs to the ABI major (PSTATE_ABI_MAJOR): its members follow the order
 *  of this header's declarations as of 1.0 (the one reordering, made at the major bump), and
 *  within a major it only grows at its end, a new function appended after the last member.
 *  struct_size is sizeof the table the library was built with: a member exists when
 *  offsetof(pstate_api_t, member) < struct_size. */
struct pstate_api_t {
  size_t struct_size;
  uint32_t abi_major;       /**< the major this table is for */
  uint32_t library_version; /**< pstate_version() of the library that filled the table */
  /* errors, versions, names */
  const char * (*status_string)(pstate_status_t s);
  const char * (*last_error)(void);
  uint32_t (*version)(void);
  const char * (*dtype_name)(pstate_dtype_t dtype);
  const char * (*reduce_op_name)(pstate_reduce_op_t op);
  const char * (*group_kind_name)(pstate_group_kind_t kind);
  size_t (*dtype_size)(pstate_dtype_t dtype);
  /* layout */
  pstate_status_t (*layout_create)(int world_size, const pstate_parallel_config_t *cfg, pstate_layout_t **out);
  pstate_status_t (*layout_group_count)(const pstate_layout_t *l, pstate_group_kind_t kind, size_t *count);
  pstate_status_t (*layout_group_ranks)(const pstate_layout_t *l, pstate_group_kind_t kind, size_t index, int *ranks, size_t capacity, size_t *count);
  pstate_status_t (*layout_group_of)(const pstate_layout_t *l, pstate_group_kind_t kind, int rank, size_t *index);
  void (*layout_destroy)(pstate_layout_t *l);
  /* lifecycle */
  pstate_status_t (*init)(const pstate_init_params_t *params, pstate_t **out);
  pstate_status_t (*initialize_model_parallel)(pstate_t *ps, const pstate_parallel_config_t *cfg);
  int (*model_parallel_is_initialized)(const pstate_t *ps);
  pstate_status_t (*destroy_model_parallel)(pstate_t *ps);
  pstate_status_t (*finalize)(pstate_t *ps);
  pstate_status_t (*abort)(pstate_t *ps);
  pstate_status_t (*revoke)(pstate_t *ps);
  pstate_status_t (*set_interrupt_check)(pstate_t *ps, pstate_interrupt_fn fn, void *user);
  pstate_status_t (*trace_dump)(pstate_t *ps, const char *path);
  /* groups and survivors */
  pstate_status_t (*get_group)(pstate_t *ps, pstate_group_kind_t kind, pstate_group_t **out);
  pstate_status_t (*group_info)(const pstate_group_t *g, pstate_group_info_t *out);
  pstate_status_t (*group_ranks)(const pstate_group_t *g, int *ranks, size_t capacity, size_t *count);
  pstate_status_t (*live_ranks)(pstate_t *ps, int *ranks, size_t capacity, size_t *count);
  pstate_status_t (*shrink)(pstate_t *ps, int *new_rank, size_t capacity, size_t *count);
  pstate_status_t (*grow)(pstate_t *ps, int64_t timeout_ms);
  pstate_status_t (*new_group)(pstate_t *ps, const int *ranks, size_t count, pstate_group_t **out);
  pstate_status_t (*group_same_node)(const pstate_group_t *g, int root, int *same_node, size_t capacity, size_t *count);
  /* collectives and point-to-point */
  pstate_status_t (*all_reduce)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream);
  pstate_status_t (*all_gather)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, void *stream);
  pstate_status_t (*reduce_scatter)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream);
  pstate_status_t (*broadcast)(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int root, void *stream);
  pstate_status_t (*gather)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, int root, void *stream);
  pstate_status_t (*all_to_all)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, void *stream);
  pstate_status_t (*reduce)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, int root, void *stream);
  pstate_status_t (*scatter)(pstate_group_t *g, const void *send, void *recv, size_t count, pstate_dtype_t dtype, int root, void *stream);
  pstate_status_t (*all_gatherv)(pstate_group_t *g, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype, void *stream);
  pstate_status_t (*reduce_scatterv)(pstate_group_t *g, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream);
  pstate_status_t (*send)(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype, int peer, void *stream);
  pstate_status_t (*recv)(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int peer, void *stream);
  pstate_status_t (*barrier)(pstate_group_t *g);
  pstate_status_t (*tp_allreduce)(pstate_t *ps, void *buf, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op, void *stream);
  pstate_status_t (*tp_allgather)(pstate_t *ps, const void *send, void *recv, size_t count, pstate_dtype_t dtype, void *stream);
  /* objects */
  pstate_status_t (*broadcast_object)(pstate_group_t *g, const void *data, size_t size, int root, pstate_bytes_t *out);
  pstate_status_t (*all_gather_object)(pstate_group_t *g, const void *data, size_t size, pstate_bytes_t *out, size_t *sizes, size_t capacity, size_t *count);
  pstate_status_t (*send_object)(pstate_group_t *g, const void *data, size_t size, int peer);
  pstate_status_t (*recv_object)(pstate_group_t *g, int peer, pstate_bytes_t *out);
  void (*bytes_free)(pstate_bytes_t *b);
  /* tensor dicts */
  pstate_status_t (*broadcast_tensor_dict)(pstate_group_t *g, const pstate_tensor_t *tensors, size_t count, int root, pstate_alloc_fn alloc, void *user, void *stream);
  pstate_status_t (*send_tensor_dict)(pstate_group_t *g, const pstate_tensor_t *tensors, size_t count, int peer, void *stream);
  pstate_status_t (*recv_tensor_dict)(pstate_group_t *g, int peer, pstate_alloc_fn alloc, void *user, void *stream);
  pstate_status_t (*send_tensor_dict_sliced)(pstate_group_t *g, const pstate_tensor_t *tensors, size_t count, int peer, pstate_group_t *ag, void *stream);
  pstate_status_t (*recv_tensor_dict_sliced)(pstate_group_t *g, int peer, pstate_group_t *ag, pstate_alloc_fn alloc, void *user, void *stream);
  /* non-blocking and batched point-to-point */
  pstate_status_t (*isend)(pstate_group_t *g, const void *buf, size_t count, pstate_dtype_t dtype, int peer, void *stream, pstate_request_t **req);
  pstate_status_t (*irecv)(pstate_group_t *g, void *buf, size_t count, pstate_dtype_t dtype, int peer, void *stream, pstate_request_t **req);
  pstate_status_t (*wait)(pstate_request_t *req);
  pstate_status_t (*test)(pstate_request_t *req, int *done);
  pstate_status_t (*p2p_batch)(pstate_group_t *g, const pstate_p2p_op_t *ops, size_t n, void *stream);
  /* graph capture */
  pstate_status_t (*graph_capture_begin)(pstate_t *ps, void *stream, void **capture_stream);
  pstate_status_t (*graph_capture_end)(pstate_t *ps);
  /* 1.x additions go here, at the end, in the order they are released */
  /* group memory and registered buffers (docs/abi.md: what 1.x added) */
  pstate_status_t (*mem_alloc)(pstate_group_t *g, size_t bytes, void **out);
  pstate_status_t (*mem_free)(pstate_group_t *g, void *ptr);
  pstate_status_t (*mem_pool_reserve)(pstate_group_t *g, size_t bytes);
  pstate_status_t (*mem_register)(pstate_group_t *g, void *ptr, size_t bytes);
  pstate_status_t (*mem_deregister)(pstate_group_t *g, void *ptr);
  pstate_status_t (*mem_query)(pstate_group_t *g, const void *ptr, pstate_mem_info_t *out);
  pstate_status_t (*group_mem_stats)(pstate_group_t *g, pstate_mem_stats_t *out);
  pstate_status_t (*set_graph_registration)(pstate_t *ps, int enable);
  /* variable all-to-all (issue 43) */
  pstate_status_t (*all_to_all_v)(pstate_group_t *g, const void *send, const size_t *send_counts,
                                  const size_t *send_displs, void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, pstate_dtype_t dtype, void *stream);
  /* metrics (docs/metrics.md) */
  pstate_status_t (*metrics_text)(pstate_t *ps, char *out, size_t capacity, size_t *count);
  /* hooks (docs/hooks.md) */
  pstate_status_t (*add_hook)(pstate_t *ps, pstate_hook_fn fn, void *user, uint64_t *id);
  pstate_status_t (*remove_hook)(pstate_t *ps, uint64_t id);
  /* a group's own timeout (docs/timeouts.md) */
  pstate_status_t (*group_set_timeout)(pstate_group_t *g, int64_t timeout_ms);
  pstate_status_t (*group_timeout)(const pstate_group_t *g, int64_t *timeout_ms);
};

/** The table for ABI `abi_major` (pass PSTATE_ABI_MAJOR), or NULL when this library does not
 *  provide that major. The table is static: never freed, valid while the library is loaded. */
PSTATE_API const pstate_api_t *pstate_get_api(uint32_t abi_major);

#ifdef __cplusplus
}
#endif

#endif /* PSTATE_PSTATE_H */
