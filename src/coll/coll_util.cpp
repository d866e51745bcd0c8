// coll_util.cpp — argument checks and the chunked reducing ring step shared by the ring algorithms.
#include "coll/coll_util.hpp"

#include <algorithm>

namespace pstate::coll::detail {

size_t element_size(pstate_dtype_t dtype, const char *algorithm) {
  const size_t esize = dtype_size(dtype);
  if (esize == 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, algorithm, ": dtype ", static_cast<int>(dtype), " is not a pstate_dtype_t");
  return esize;
}

void require_reduction(pstate_dtype_t dtype, pstate_reduce_op_t op, const char *algorithm) {
  element_size(dtype, algorithm);
  if (!is_reducible(dtype))
    throw_error(PSTATE_ERR_UNSUPPORTED, algorithm, ": ", pstate_dtype_name(dtype),
                " is move-only on CPU (no reductions); reduce in float16/bfloat16/float32 instead");
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= PSTATE_REDUCE_OP_COUNT)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, algorithm, ": op ", static_cast<int>(op), " is not a pstate_reduce_op_t");
}

void require_root(const Channel &ch, int root, const char *algorithm) {
  if (root < 0 || root >= ch.size())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, algorithm, ": root ", root, " is not a rank of this group of ",
                ch.size(), " (pass a group rank, 0..", ch.size() - 1, ")");
}

void RingReduceStep::run(const uint8_t *out, size_t out_elems, uint8_t *target, const uint8_t *own, size_t in_elems) {
  // Every chunk of the outgoing block is ready now: post them all, the peer drains in order.
  std::vector<Channel::Request> sends;
  for (size_t off = 0; off < out_elems; off += chunk_elems) {
    const size_t n = std::min(chunk_elems, out_elems - off);
    sends.push_back(ch.isend(right, out + off * esize, n * esize, tag));
  }

  const size_t chunk_bytes = chunk_elems * esize;
  const size_t chunks_in = (in_elems + chunk_elems - 1) / chunk_elems;
  const size_t slots = std::min<size_t>(2, chunks_in);
  if (scratch.size() < slots * chunk_bytes) scratch.resize(slots * chunk_bytes);
  auto chunk_size = [&](size_t k) { return std::min(chunk_elems, in_elems - k * chunk_elems); };

  Channel::Request pending[2] = {0, 0};
  for (size_t k = 0; k < slots; ++k) pending[k] = ch.irecv(left, scratch.data() + k * chunk_bytes, chunk_size(k) * esize, tag);
  for (size_t k = 0; k < chunks_in; ++k) {
    const size_t slot = k % 2, n = chunk_size(k), off = k * chunk_elems * esize;
    uint8_t *incoming = scratch.data() + slot * chunk_bytes;
    ch.wait_all(&pending[slot], 1);
    reduce_into(target + off, incoming, own + off, n, dtype, op);
    if (k + 2 < chunks_in) pending[slot] = ch.irecv(left, incoming, chunk_size(k + 2) * esize, tag);
  }
  if (!sends.empty()) ch.wait_all(sends.data(), sends.size());
}

}  // namespace pstate::coll::detail

namespace pstate {

Channel::Request Channel::irecv_upto(int, void *, size_t, uint32_t, size_t *) {
  throw_error(PSTATE_ERR_INTERNAL, "this channel has no receive of a bounded length (irecv_upto)");
}

}  // namespace pstate
