/*
 * devsim.h — what the devsim stand-ins export to each other (and to nothing else).
 *
 * libpstate_devsim_cudart.so is the CUDA runtime stand-in; libpstate_devsim_nccl.so (the NCCL
 * stand-in) and libcuda.so.1 (the driver entry pstate's CPU contexts look up) call it through
 * these few functions, so that NCCL work runs on the runtime's stream workers and every library
 * agrees on what memory is "device" memory. libpstate never calls them: it sees only the CUDA
 * runtime and NCCL symbols.
 */
#ifndef PSTATE_DEVSIM_H
#define PSTATE_DEVSIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the runtime knows of an address: kind 0 = unknown (pageable host), 1 = pinned host
 * (cudaMallocHost), 2 = device (cudaMalloc), 3 = managed (cudaMallocManaged). For known
 * addresses, *base and *size are the allocation's and *device its ordinal (-1 for pinned host). */
int devsim_pointer_info(const void *p, int *kind, int *device, uintptr_t *base, size_t *size);

/* Enqueues fn(arg) on `stream` (NULL: the legacy stream of the current device) in stream order,
 * or records it into the capture when the stream is capturing (a graph launch then runs it
 * again, once per launch; *recorded is then 1). release(arg) runs when the last queue or graph
 * holding it is gone (also when the call fails). Returns a cudaError_t
 * (cudaErrorStreamCaptureInvalidated, cudaErrorInvalidResourceHandle, ...). */
int devsim_stream_enqueue(void *stream, void (*fn)(void *arg), void *arg, void (*release)(void *arg), int *recorded);

/* 1 when work enqueued on `stream` now would be recorded into a capture, else 0. */
int devsim_stream_capturing(void *stream);

/* The device ordinal a stream belongs to (the current device for NULL), or -1 for a bad handle. */
int devsim_stream_device(void *stream);

/* The NCCL stand-in's counts in this process since it was loaded (issue 13: bootstraps before and
 * after communicator splitting): ncclCommInitRank(Config) calls, ncclGetUniqueId ids made,
 * ncclCommSplit calls (any colour), communicators made (by init or as a split's child). Tests find
 * it with dlopen(PSTATE_NCCL_LIBRARY, RTLD_NOLOAD) + dlsym; any pointer may be NULL. */
void devsim_nccl_counts(unsigned long long *init_calls, unsigned long long *unique_ids,
                        unsigned long long *split_calls, unsigned long long *communicators);

/* Issue 15: ncclCommShrink and ncclCommRevoke calls in this process since it was loaded (found
 * the same way; either pointer may be NULL). */
void devsim_nccl_shrink_counts(unsigned long long *shrink_calls, unsigned long long *revoke_calls);

/* Issue 29: registered memory in this process since the NCCL stand-in was loaded (found the same
 * way): out[0] ncclCommWindowRegister successes, [1] ncclCommWindowDeregister, [2]
 * ncclCommRegister, [3] ncclCommDeregister, [4] all_reduce/all_gather/reduce_scatter calls whose
 * buffers both lay in the communicator's symmetric windows (NCCL's symmetric kernels), [5] calls
 * whose buffers were registered otherwise (zero-copy), [6] ncclMemAlloc, [7] ncclMemFree. */
void devsim_nccl_memory_counts(unsigned long long out[8]);

#ifdef __cplusplus
}
#endif

#endif
