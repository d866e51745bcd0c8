// coll_util.hpp — small helpers shared by the algorithm files of src/coll/ (not a public API).
//
// Block partitions (how a buffer of `count` elements is cut into one block per rank), rank
// arithmetic modulo the group size, tag composition, argument checks, and the chunked ring step
// used by every ring that reduces (allreduce_ring, reduce_scatter_ring, reduce_scatterv_ring).
#pragma once

#include "transport/channel.hpp"
#include "common/error.hpp"
#include "reduce/reduce.hpp"

#include <pstate/pstate.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pstate::coll::detail {

// Rank a modulo p, for any int a (negative included).
inline int mod(int a, int p) { return ((a % p) + p) % p; }

// The tag of step `step` of an operation whose tags start at tag_base (group convention:
// tag_base = (sequence & 0xffff) << 16). Steps wrap at 65536; that is safe because messages
// between the same pair with the same tag are delivered in order and every algorithm posts its
// receives in the order its peer sends.
inline uint32_t step_tag(uint32_t tag_base, uint32_t step) { return tag_base + (step & 0xFFFFu); }

// `count` elements cut into `parts` blocks: the first count % parts blocks get one extra element.
// Every rank computes the same partition, so sender and receiver agree on every block's size.
struct BlockPartition {
  size_t count;
  int parts;
  size_t size(int b) const {
    const size_t base = count / static_cast<size_t>(parts), extra = count % static_cast<size_t>(parts);
    return base + (static_cast<size_t>(b) < extra ? 1 : 0);
  }
  size_t offset(int b) const {
    const size_t base = count / static_cast<size_t>(parts), extra = count % static_cast<size_t>(parts);
    const size_t ub = static_cast<size_t>(b);
    return ub * base + (ub < extra ? ub : extra);
  }
};

// The blocks of a variable-size collective (allgatherv, reduce_scatterv): block b holds
// counts[b] elements and starts right after block b-1. Sizes and offsets in bytes; every rank
// passes the same counts, so sender and receiver agree on every block. The caller has checked
// that the total fits (src/api/).
class VarBlocks {
 public:
  VarBlocks(const size_t *counts, int parts, size_t esize) : offsets_(static_cast<size_t>(parts) + 1, 0) {
    for (size_t b = 0; b < static_cast<size_t>(parts); ++b) offsets_[b + 1] = offsets_[b] + counts[b] * esize;
  }
  size_t offset(int b) const { return offsets_[static_cast<size_t>(b)]; }
  size_t size(int b) const { return offsets_[static_cast<size_t>(b) + 1] - offsets_[static_cast<size_t>(b)]; }
  size_t total_bytes() const { return offsets_.back(); }

 private:
  std::vector<size_t> offsets_;
};

inline const uint8_t *bytes(const void *p) { return static_cast<const uint8_t *>(p); }
inline uint8_t *bytes(void *p) { return static_cast<uint8_t *>(p); }

// memmove when the two regions differ (memmove: an in-place caller may pass overlapping views).
inline void copy_if_distinct(void *dst, const void *src, size_t n) {
  if (dst != src && n != 0) std::memmove(dst, src, n);
}

// The element size of dtype; INVALID_ARGUMENT for a number that is not a dtype.
size_t element_size(pstate_dtype_t dtype, const char *algorithm);
// Throws UNSUPPORTED (fp8) or INVALID_ARGUMENT (bad dtype or op) before any message is posted,
// so a bad reduction fails the same way on every rank and never half-way through.
void require_reduction(pstate_dtype_t dtype, pstate_reduce_op_t op, const char *algorithm);
// INVALID_ARGUMENT unless 0 <= root < group size.
void require_root(const Channel &ch, int root, const char *algorithm);

// One ring step of a reducing ring, chunked and pipelined:
//   - sends out_elems elements at `out` to `right`, in chunks of chunk_elems;
//   - receives in_elems elements from `left` in the same chunking into two rotating scratch
//     slots, and as each chunk lands sets target[i] = incoming[i] op own[i] (target may alias own).
// So a block of any size needs only two chunks of scratch, and the reduction of chunk k overlaps
// the transfer of chunk k+1.
struct RingReduceStep {
  Channel &ch;
  int right, left;
  size_t esize, chunk_elems;
  pstate_dtype_t dtype;
  pstate_reduce_op_t op;
  uint32_t tag;
  std::vector<uint8_t> &scratch;  // resized to two chunks on demand

  void run(const uint8_t *out, size_t out_elems, uint8_t *target, const uint8_t *own, size_t in_elems);
};

}  // namespace pstate::coll::detail
