// bench_ops.hpp — one size of one operation of `pstate bench`: its buffers, the crafted --check
// inputs, the call through the public C API, and the count of wrong results afterwards.
//
// cli_bench.cpp owns the sweep, the timing loop and the output; this file knows what each op
// sends and receives. Buffers and inputs follow bench_common.h, the same as bench/mpi_bench.c,
// so the two programs move the same bytes: every op is out of place except broadcast (in place by
// definition); send_recv is a ping-pong between group ranks 2k and 2k+1 whose timed iteration is
// the round trip (the caller halves it); broadcast_object sends from group rank 0; all_gatherv's
// parts are uneven (bench_gatherv_weight); sendrecv is the ring of isend/irecv/wait.
#pragma once

#include "cli/bench_common.h"
#include "pstate/pstate.h"

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

namespace pstate::cli {

struct BenchSpec {
  bench_op_t op = BENCH_ALL_REDUCE;
  pstate_dtype_t dtype = PSTATE_FLOAT32;
  pstate_reduce_op_t redop = PSTATE_SUM;
};

// A page-aligned heap buffer (free()d), so sizes up to 64 MiB start on a page like MPI's.
struct FreeDeleter {
  void operator()(unsigned char *p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<unsigned char, FreeDeleter>;
AlignedBytes aligned_bytes(size_t bytes);

class OpRun {
 public:
  // Buffers for `count` elements per block (bench_count_for) on a group of `size` ranks in which
  // this rank is `rank`, filled with the --check inputs.
  OpRun(const BenchSpec &spec, pstate_group_t *group, int rank, int size, size_t count);
  ~OpRun();
  OpRun(const OpRun &) = delete;
  OpRun &operator=(const OpRun &) = delete;

  // One call of the op; throws pstate::Error naming the op and size when pstate fails.
  void run_once();
  // Frees what the last call handed out (broadcast_object's bytes), outside the timed region;
  // keeps the newest so count_wrong can read it.
  void release_previous();
  // Elements (reductions) or bytes (moves) of this rank's last output that differ from the
  // exact expected result.
  long count_wrong() const;

 private:
  void fill_inputs();
  void fail(pstate_status_t st) const;

  BenchSpec spec_;
  pstate_group_t *group_;
  int rank_, size_;
  size_t count_, elem_, block_;
  size_t send_bytes_ = 0, recv_bytes_ = 0;
  std::vector<size_t> counts_;  // all_gatherv: every rank's part, in elements
  AlignedBytes send_, recv_;
  pstate_bytes_t object_{nullptr, 0}, previous_object_{nullptr, 0};
};

}  // namespace pstate::cli
