// algorithms.hpp — every collective algorithm of src/coll/, over the Channel interface.
//
// One algorithm per .cpp file, each opening with a comment that explains it and its reduction
// order. All of them:
//   - take group ranks (Channel::rank()/size()) and are called by every rank of the group with
//     the same count (or counts array), dtype, op, root and tag_base;
//   - return when this rank's part is complete, and throw pstate::Error on failure (the Channel's
//     TIMEOUT/PEER_LOST/TRANSPORT/MISMATCH, or INVALID_ARGUMENT/UNSUPPORTED found before any
//     message is posted, so every rank fails alike);
//   - accept count 0 (return at once, no messages) and any group size >= 1;
//   - give bit-identical results on every rank: each reduced element is computed by exactly one
//     chain of reduce_into calls (or by partners computing the same commutative op on the same
//     two operands), and the result is copied, never recomputed;
//   - apply PSTATE_AVG's finish_avg (division by the group size) exactly once per element,
//     before the result is distributed;
//   - never post a zero-byte message, except the object operations for an empty object.
//
// Tags: the group layer passes tag_base = (op sequence number & 0xffff) << 16; an algorithm
// adds a step number (detail::step_tag: tag_base + (step & 0xffff)). Messages between the same
// pair with the same tag are delivered in order (Channel contract), and every algorithm posts its
// receives in the order the peer sends, so reusing a tag within one operation is safe.
//
// In place: send == recv for allreduce, alltoall and (on the root) reduce; for allgather and
// gather, send == recv + rank * send_count * dtype_size (MPI/NCCL's in-place convention); for
// reduce_scatter, recv == send + rank * recv_count * dtype_size, and for scatter (on the root)
// recv == send + root * recv_count * dtype_size; for the v-collectives the same at the rank's
// offset: allgatherv send == recv + (counts[0] + ... + counts[rank-1]) * dtype_size,
// reduce_scatterv recv == send + that offset. Other partial overlaps are not supported.
#pragma once

#include "transport/channel.hpp"

#include <pstate/pstate.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstate::coll {

// ---- tuning (named so the selector and the tests can refer to them) -------------------------
// Ring and chain pipelines move blocks in chunks of at most this many bytes; scratch per call is
// two chunks, whatever the buffer size.
inline constexpr size_t kRingChunkBytes = 256 * 1024;
inline constexpr size_t kChainChunkBytes = 256 * 1024;

// ---- reductions -------------------------------------------------------------------------------
// recv[i] = op over ranks of send[i], count elements; send == recv means in place.
void allreduce_recursive_doubling(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                                  pstate_reduce_op_t op, uint32_t tag_base);
void allreduce_ring(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                    pstate_reduce_op_t op, uint32_t tag_base);
// send holds size() * recv_count elements; rank r's recv gets the reduction of block r.
void reduce_scatter_ring(Channel &ch, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, uint32_t tag_base);
// send holds sum(counts) elements (counts: size() entries); rank r's recv (counts[r] elements)
// gets the reduction of block r, which starts at counts[0] + ... + counts[r-1].
void reduce_scatterv_ring(Channel &ch, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                          pstate_reduce_op_t op, uint32_t tag_base);
// On root, recv[i] = op over ranks of send[i], count elements (send == recv: in place); recv is
// not used on the other ranks (may be nullptr) and never written there.
void reduce_binomial(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                     pstate_reduce_op_t op, int root, uint32_t tag_base);
void reduce_ring(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype, pstate_reduce_op_t op,
                 int root, uint32_t tag_base);

// ---- data movement ----------------------------------------------------------------------------
// recv (size() * send_count elements) = every rank's send, in group-rank order.
void allgather_ring(Channel &ch, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                    uint32_t tag_base);
void allgather_bruck(Channel &ch, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype,
                     uint32_t tag_base);
// recv (sum(counts) elements; counts: size() entries) = every rank's send (counts[rank]
// elements), packed in group-rank order.
void allgatherv_ring(Channel &ch, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                     uint32_t tag_base);
// buf (count elements) of group rank root is copied to every rank's buf.
void broadcast_binomial(Channel &ch, void *buf, size_t count, pstate_dtype_t dtype, int root, uint32_t tag_base);
void broadcast_pipelined_chain(Channel &ch, void *buf, size_t count, pstate_dtype_t dtype, int root,
                               uint32_t tag_base);
// On root, recv (size() * send_count elements) = every rank's send in rank order; recv is not
// used on other ranks (may be nullptr).
void gather_linear(Channel &ch, const void *send, void *recv, size_t send_count, pstate_dtype_t dtype, int root,
                   uint32_t tag_base);
// Block r of root's send (size() * recv_count elements) goes to rank r's recv; send is not used
// on other ranks (may be nullptr).
void scatter_linear(Channel &ch, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype, int root,
                    uint32_t tag_base);
// Block j of send (count_per_rank elements) goes to rank j; block i of recv comes from rank i.
void alltoall_pairwise(Channel &ch, const void *send, void *recv, size_t count_per_rank, pstate_dtype_t dtype,
                       uint32_t tag_base);
// all_to_all_v (alltoallv_pairwise.cpp). First every rank calls agree_alltoallv_counts (the
// same on every rank): it returns the first pair (sender, receiver) whose counts disagree, found
// alike by every rank, or found == false; only then alltoallv_pairwise moves the data, part j of
// send (send_counts[j] elements at send_displs[j]) to rank j, part i of recv from rank i.
struct AlltoallvDisagreement {
  bool found = false;
  int sender = -1, receiver = -1;  // group ranks
  uint64_t sent = 0, expected = 0;  // sender's send_counts[receiver], receiver's recv_counts[sender]
};
AlltoallvDisagreement agree_alltoallv_counts(Channel &ch, const size_t *send_counts, const size_t *recv_counts,
                                             uint32_t tag_base);
void alltoallv_pairwise(Channel &ch, const void *send, const size_t *send_counts, const size_t *send_displs,
                        void *recv, const size_t *recv_counts, const size_t *recv_displs, pstate_dtype_t dtype,
                        uint32_t tag_base);
// Returns on a rank only after every rank has entered.
void barrier_dissemination(Channel &ch, uint32_t tag_base);

// ---- objects: variable-length bytes, sizes not agreed in advance --------------------------------
// Root sends size bytes at data; every rank's *out receives them (on root, out may be nullptr;
// when given it receives a copy). data is read on root only.
void broadcast_object(Channel &ch, const void *data, size_t size, int root, std::vector<uint8_t> *out,
                      uint32_t tag_base);
// *out = every rank's bytes concatenated in group-rank order; (*sizes)[i] = rank i's size.
void all_gather_object(Channel &ch, const void *data, size_t size, std::vector<uint8_t> *out,
                       std::vector<size_t> *sizes, uint32_t tag_base);
// Point to point: the receiver learns the size. tag is the caller's (e.g. a per-pair counter in
// its own tag space), since point-to-point calls do not advance the group's sequence number.
void send_object(Channel &ch, const void *data, size_t size, int dst, uint32_t tag);
void recv_object(Channel &ch, int src, std::vector<uint8_t> *out, uint32_t tag);

// ---- the same algorithms with an explicit chunk size (tests exercise deep pipelines with small
// buffers through these; the functions above pass kRingChunkBytes / kChainChunkBytes) -----------
void allreduce_ring_chunked(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                            pstate_reduce_op_t op, uint32_t tag_base, size_t chunk_bytes);
void reduce_scatter_ring_chunked(Channel &ch, const void *send, void *recv, size_t recv_count, pstate_dtype_t dtype,
                                 pstate_reduce_op_t op, uint32_t tag_base, size_t chunk_bytes);
void reduce_scatterv_ring_chunked(Channel &ch, const void *send, void *recv, const size_t *counts, pstate_dtype_t dtype,
                                  pstate_reduce_op_t op, uint32_t tag_base, size_t chunk_bytes);
void reduce_ring_chunked(Channel &ch, const void *send, void *recv, size_t count, pstate_dtype_t dtype,
                         pstate_reduce_op_t op, int root, uint32_t tag_base, size_t chunk_bytes);
void broadcast_pipelined_chain_chunked(Channel &ch, void *buf, size_t count, pstate_dtype_t dtype, int root,
                                       uint32_t tag_base, size_t chunk_bytes);

}  // namespace pstate::coll
