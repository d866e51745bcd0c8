// test_shm_group.cpp — ShmGroup collectives give the reference result, bit-identical on every rank
// (reduce: on its root, bit-identical with all_reduce; scatter: every block where it belongs).
//
// Ranks are real forked processes (2, 3, 4 and 8 of them) on one real shared segment. Every
// expected value is computed here, element by element, from the inputs' formula (fold in rank
// order 0..size-1, as documented), never by the code under test. Every test also proves that
// nothing is left in /dev/shm. Small chunk options push modest counts through the multi-step,
// pipelined paths; the 64 MiB tests use the default options.
#include "test_shm_util.hpp"
#include "transport/shm/shm_group.hpp"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
}

#include <random>
#include <stdexcept>

using namespace shmtest;
using pstate::Deadline;
using pstate::shm::ShmGroup;
using pstate::shm::ShmGroupOptions;

namespace {

// TSan instruments every access of the many-MiB tests' buffers and references (those three took
// most of its 30 s here): it runs them at 1/8 of the size, still 8 to 32 pipelined steps, and a
// race is between two steps. The plain and ASan runs take the full sizes.
#if defined(__SANITIZE_THREAD__)
constexpr size_t kLargeDiv = 8;
#else
constexpr size_t kLargeDiv = 1;
#endif

constexpr int kGuard = 64;          // bytes after each result that must stay untouched
constexpr uint8_t kGuardByte = 0xa5;

// Small limits so that modest counts take every path: inline up to 256 bytes (one line or
// several), whole-input staging up to one 4 KiB area, then several pipelined steps; copies into
// the areas from 3000 bytes and outputs from 12000 bytes use non-temporal stores.
ShmGroupOptions small_chunk_options(PeerWatch *watch) {
  ShmGroupOptions o;
  o.label = "test group";
  o.inline_bytes = 256;
  o.inline_depth = 3;
  o.small_bytes = 8192;
  o.chunk_bytes = 4096;
  o.pipeline_depth = 2;
  o.stream_bytes = 12000;
  o.stage_stream_bytes = 3000;
  o.liveness = [watch] { (*watch)(); };
  return o;
}

Deadline generous() { return Deadline::after_ms(60000); }

std::vector<uint8_t> inputs(pstate_dtype_t t, int rank, size_t count, size_t first_index = 0) {
  size_t n = esize_of(t);
  std::vector<uint8_t> v(count * n + kGuard, kGuardByte);
  for (size_t i = 0; i < count; ++i) input_value(t, rank, first_index + i, v.data() + i * n);
  return v;
}

bool guard_intact(const std::vector<uint8_t> &v, size_t used) {
  for (size_t i = used; i < v.size(); ++i)
    if (v[i] != kGuardByte) return false;
  return true;
}

// Checks recv[i] against the all-reduce reference of element (first_index + i); prints the first miss.
bool check_reduced(const char *what, pstate_dtype_t t, pstate_reduce_op_t op, int size, int rank,
                   const std::vector<uint8_t> &recv, size_t count, size_t first_index = 0) {
  size_t n = esize_of(t);
  uint8_t want[8];
  for (size_t i = 0; i < count; ++i) {
    reference_element(t, op, size, first_index + i, want);
    if (!element_matches(t, op, recv.data() + i * n, want)) {
      fprintf(stderr, "rank %d: %s %s %s count %zu: element %zu differs from the reference\n", rank, what,
              dtype_name(t), op_name(op), count, i);
      return false;
    }
  }
  if (!guard_intact(recv, count * n)) {
    fprintf(stderr, "rank %d: %s %s count %zu wrote past the end of recv\n", rank, what, dtype_name(t), count);
    return false;
  }
  return true;
}

void expect_all_ranks_ok_and_identical(const std::vector<int> &statuses, Board *board, int size, bool same_hash) {
  assert_true(all_ok(statuses));
  if (same_hash)
    for (int r = 1; r < size; ++r) assert_int_equal(board->hash[r].load(), board->hash[0].load());
  assert_int_equal(leftover_segments(), 0);
}

// ---- all_reduce --------------------------------------------------------------------------------

int all_reduce_matrix_rank(int rank, int size, const std::string &name, Board *board,
                           const std::vector<pstate_dtype_t> &dtypes, const std::vector<size_t> &counts) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  uint64_t h = 0;
  bool in_place = false;
  for (pstate_dtype_t t : dtypes)
    for (pstate_reduce_op_t op : kOps)
      for (size_t count : counts) {
        size_t n = esize_of(t);
        std::vector<uint8_t> send = inputs(t, rank, count);
        std::vector<uint8_t> recv(count * n + kGuard, kGuardByte);
        in_place = !in_place;  // alternate: half the cases run in place
        if (in_place) recv = send;
        g.all_reduce(in_place ? recv.data() : send.data(), recv.data(), count, t, op, generous());
        if (!check_reduced("all_reduce", t, op, size, rank, recv, count)) return 1;
        h = fnv1a(recv.data(), count * n) ^ (h * 31);
      }
  board->hash[rank] = h;
  return 0;
}

void run_all_reduce_matrix(int size, const std::vector<pstate_dtype_t> &dtypes) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("ar");
  const std::vector<size_t> counts = {0, 1, 13, 60, 1000, 5003};  // 5003 float32 = 5 steps of 4 KiB
  auto statuses = run_ranks(size, board, [&](int r) {
    return all_reduce_matrix_rank(r, size, name, board, dtypes, counts);
  });
  expect_all_ranks_ok_and_identical(statuses, board, size, true);
  free_shared(board, 1);
}

const std::vector<pstate_dtype_t> kAllReducible(std::begin(kReducibleDtypes), std::end(kReducibleDtypes));

void test_all_reduce_2_ranks_every_dtype_and_op_matches_reference(void **) { run_all_reduce_matrix(2, kAllReducible); }
void test_all_reduce_3_ranks_every_dtype_and_op_matches_reference(void **) { run_all_reduce_matrix(3, kAllReducible); }
void test_all_reduce_4_ranks_every_dtype_and_op_matches_reference(void **) { run_all_reduce_matrix(4, kAllReducible); }
void test_all_reduce_8_ranks_every_dtype_and_op_matches_reference(void **) { run_all_reduce_matrix(8, kAllReducible); }

// Default options (256 KiB areas): 64 MiB float32 goes through 256 pipelined steps.
void run_all_reduce_large(int size, size_t count, pstate_reduce_op_t op, bool in_place) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("ar-large");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmGroupOptions o;
    o.label = "large";
    o.liveness = [&watch] { watch(); };
    ShmGroup g(name, rank, size, generous(), o);
    std::vector<uint8_t> send = inputs(PSTATE_FLOAT32, rank, count);
    std::vector<uint8_t> recv = in_place ? send : std::vector<uint8_t>(send.size(), kGuardByte);
    g.all_reduce(in_place ? recv.data() : send.data(), recv.data(), count, PSTATE_FLOAT32, op, generous());
    if (!check_reduced("all_reduce", PSTATE_FLOAT32, op, size, rank, recv, count)) return 1;
    board->hash[rank] = fnv1a(recv.data(), count * 4);
    return 0;
  });
  expect_all_ranks_ok_and_identical(statuses, board, size, true);
  free_shared(board, 1);
}

void test_all_reduce_64MiB_float32_sum_2_ranks(void **) {
  run_all_reduce_large(2, (64u << 20) / 4 / kLargeDiv, PSTATE_SUM, false);
}
void test_all_reduce_odd_16MiB_float32_avg_in_place_4_ranks(void **) {
  run_all_reduce_large(4, (16u << 20) / 4 / kLargeDiv + 7, PSTATE_AVG, true);
}

// ---- all_gather --------------------------------------------------------------------------------

int all_gather_rank(int rank, int size, const std::string &name, Board *board) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  uint64_t h = 0;
  const pstate_dtype_t dtypes[] = {PSTATE_UINT8, PSTATE_FLOAT16, PSTATE_INT32, PSTATE_FLOAT64, PSTATE_FP8_E4M3};
  for (pstate_dtype_t t : dtypes)
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{60}, size_t{3001}})
      for (bool in_place : {false, true}) {
        size_t n = esize_of(t);
        std::vector<uint8_t> recv(size * count * n + kGuard, kGuardByte);
        std::vector<uint8_t> send = inputs(t, rank, count);
        const void *src = send.data();
        if (in_place) {
          std::memcpy(recv.data() + rank * count * n, send.data(), count * n);
          src = recv.data() + rank * count * n;
        }
        g.all_gather(src, recv.data(), count, t, generous());
        for (int r = 0; r < size; ++r) {
          std::vector<uint8_t> want = inputs(t, r, count);
          if (std::memcmp(recv.data() + r * count * n, want.data(), count * n) != 0) {
            fprintf(stderr, "rank %d: all_gather %s count %zu: block of rank %d wrong\n", rank, dtype_name(t), count, r);
            return 1;
          }
        }
        if (!guard_intact(recv, size * count * n)) return 2;
        h = fnv1a(recv.data(), size * count * n) ^ (h * 31);
      }
  board->hash[rank] = h;
  return 0;
}

void run_all_gather(int size) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("ag");
  auto statuses = run_ranks(size, board, [&](int r) { return all_gather_rank(r, size, name, board); });
  expect_all_ranks_ok_and_identical(statuses, board, size, true);
  free_shared(board, 1);
}

void test_all_gather_2_ranks_matches_inputs(void **) { run_all_gather(2); }
void test_all_gather_3_ranks_matches_inputs(void **) { run_all_gather(3); }
void test_all_gather_8_ranks_matches_inputs(void **) { run_all_gather(8); }

// ---- reduce_scatter ----------------------------------------------------------------------------

int reduce_scatter_rank(int rank, int size, const std::string &name, Board *board,
                        const std::vector<pstate_dtype_t> &dtypes) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  for (pstate_dtype_t t : dtypes)
    for (pstate_reduce_op_t op : kOps)
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{13}, size_t{2003}})
        for (int form : {0, 1, 2}) {
          size_t n = esize_of(t);
          std::vector<uint8_t> send = inputs(t, rank, size * count);
          std::vector<uint8_t> recv(count * n + kGuard, kGuardByte);
          // 0: separate buffers; 1: NCCL's in-place form, recv is my own block of send;
          // 2: MPI's in-place form, recv is the start of send.
          uint8_t *dst = form == 0 ? recv.data() : send.data() + (form == 1 ? rank * count * n : 0);
          g.reduce_scatter(send.data(), dst, count, t, op, generous());
          if (form != 0) std::memcpy(recv.data(), dst, count * n);
          if (!check_reduced("reduce_scatter", t, op, size, rank, recv, count, rank * count)) return 1;
        }
  return 0;
}

void run_reduce_scatter(int size, const std::vector<pstate_dtype_t> &dtypes) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("rs");
  auto statuses = run_ranks(size, board, [&](int r) { return reduce_scatter_rank(r, size, name, board, dtypes); });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

void test_reduce_scatter_3_ranks_every_dtype_and_op_matches_reference(void **) {
  run_reduce_scatter(3, kAllReducible);
}
void test_reduce_scatter_2_4_8_ranks_float32_int64_bfloat16_match_reference(void **) {
  for (int size : {2, 4, 8}) run_reduce_scatter(size, {PSTATE_FLOAT32, PSTATE_INT64, PSTATE_BFLOAT16});
}

// ---- broadcast ---------------------------------------------------------------------------------

int broadcast_rank(int rank, int size, const std::string &name, Board *board) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  for (int root = 0; root < size; ++root)
    for (pstate_dtype_t t : {PSTATE_INT8, PSTATE_BFLOAT16, PSTATE_FLOAT32, PSTATE_FP8_E5M2})
      for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{60}, size_t{5001}}) {
        size_t n = esize_of(t);
        std::vector<uint8_t> want = inputs(t, root, count);
        std::vector<uint8_t> buf = rank == root ? want : std::vector<uint8_t>(want.size(), kGuardByte);
        g.broadcast(buf.data(), count, t, root, generous());
        if (buf != want) {
          fprintf(stderr, "rank %d: broadcast from %d %s count %zu wrong\n", rank, root, dtype_name(t), count);
          return 1;
        }
        (void)n;
      }
  return 0;
}

void run_broadcast(int size) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("bc");
  auto statuses = run_ranks(size, board, [&](int r) { return broadcast_rank(r, size, name, board); });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

void test_broadcast_from_every_root_2_ranks(void **) { run_broadcast(2); }
void test_broadcast_from_every_root_3_ranks(void **) { run_broadcast(3); }
void test_broadcast_from_every_root_8_ranks(void **) { run_broadcast(8); }

// ---- reduce ------------------------------------------------------------------------------------

// Every root, dtype and op, counts through the inline, whole-input and staged paths; the ranks
// other than the root pass recv = nullptr (a write there would crash); half of the root's calls
// in place. The root's result must be the reference and bit for bit what all_reduce gives on the
// same inputs (the same protocol, so the same folding order).
int reduce_rank(int rank, int size, const std::string &name, Board *board, const std::vector<pstate_dtype_t> &dtypes) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  bool in_place = false;
  for (int root = 0; root < size; ++root)
    for (pstate_dtype_t t : dtypes)
      for (pstate_reduce_op_t op : kOps)
        for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{60}, size_t{1000}, size_t{5003}}) {
          size_t n = esize_of(t);
          std::vector<uint8_t> send = inputs(t, rank, count);
          std::vector<uint8_t> recv(count * n + kGuard, kGuardByte), all(count * n + kGuard, kGuardByte);
          g.all_reduce(send.data(), all.data(), count, t, op, generous());
          const bool mine = rank == root;
          in_place = mine ? !in_place : in_place;
          if (mine && in_place) recv = send;
          g.reduce(mine && in_place ? recv.data() : send.data(), mine ? recv.data() : nullptr, count, t, op, root,
                   generous());
          if (!mine) continue;
          if (!check_reduced("reduce", t, op, size, rank, recv, count)) return 1;
          if (std::memcmp(recv.data(), all.data(), count * n) != 0) {
            fprintf(stderr, "rank %d: reduce %s %s count %zu root %d: not all_reduce's bits\n", rank, dtype_name(t),
                    op_name(op), count, root);
            return 2;
          }
        }
  return 0;
}

void run_reduce(int size, const std::vector<pstate_dtype_t> &dtypes) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("reduce");
  auto statuses = run_ranks(size, board, [&](int r) { return reduce_rank(r, size, name, board, dtypes); });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

void test_reduce_3_ranks_every_root_dtype_and_op_matches_reference(void **) { run_reduce(3, kAllReducible); }
void test_reduce_2_4_8_ranks_every_root_float32_int64_bfloat16_match_reference(void **) {
  for (int size : {2, 4, 8}) run_reduce(size, {PSTATE_FLOAT32, PSTATE_INT64, PSTATE_BFLOAT16});
}

// Default options: 16 MiB + 7 float32 AVG in place to the last of 4 ranks, 64 pipelined steps.
void test_reduce_odd_16MiB_float32_avg_in_place_to_the_last_of_4_ranks(void **) {
  const int size = 4, root = 3;
  const size_t count = (16u << 20) / 4 / kLargeDiv + 7;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("reduce-large");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmGroupOptions o;
    o.label = "large";
    o.liveness = [&watch] { watch(); };
    ShmGroup g(name, rank, size, generous(), o);
    std::vector<uint8_t> buf = inputs(PSTATE_FLOAT32, rank, count);
    g.reduce(buf.data(), rank == root ? buf.data() : nullptr, count, PSTATE_FLOAT32, PSTATE_AVG, root, generous());
    if (rank == root && !check_reduced("reduce", PSTATE_FLOAT32, PSTATE_AVG, size, rank, buf, count)) return 1;
    if (rank != root && buf != inputs(PSTATE_FLOAT32, rank, count)) return 2;  // send is only read
    return 0;
  });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

// ---- scatter -----------------------------------------------------------------------------------

// The root's send is inputs(root, size * count): rank r must receive elements [r * count, (r+1) *
// count) of it. The other ranks pass send = nullptr; half of the root's calls in place.
int scatter_rank(int rank, int size, const std::string &name, Board *board) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  bool in_place = false;
  for (int root = 0; root < size; ++root)
    for (pstate_dtype_t t : {PSTATE_INT8, PSTATE_BFLOAT16, PSTATE_FLOAT32, PSTATE_FP8_E5M2, PSTATE_FLOAT64})
      for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{60}, size_t{3001}}) {
        size_t n = esize_of(t);
        const bool mine = rank == root;
        std::vector<uint8_t> send = inputs(t, root, size * count);
        std::vector<uint8_t> recv(count * n + kGuard, kGuardByte);
        in_place = mine ? !in_place : in_place;
        uint8_t *dst = mine && in_place ? send.data() + rank * count * n : recv.data();
        g.scatter(mine ? send.data() : nullptr, dst, count, t, root, generous());
        if (dst != recv.data()) std::memcpy(recv.data(), dst, count * n);
        std::vector<uint8_t> want = inputs(t, root, count, rank * count);
        if (std::memcmp(recv.data(), want.data(), count * n) != 0 || !guard_intact(recv, count * n)) {
          fprintf(stderr, "rank %d: scatter from %d %s count %zu%s wrong\n", rank, root, dtype_name(t), count,
                  in_place && mine ? " in place" : "");
          return 1;
        }
        if (mine && send != inputs(t, root, size * count)) return 2;  // send is only read
      }
  return 0;
}

void run_scatter(int size) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("scatter");
  auto statuses = run_ranks(size, board, [&](int r) { return scatter_rank(r, size, name, board); });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

void test_scatter_from_every_root_2_ranks(void **) { run_scatter(2); }
void test_scatter_from_every_root_3_ranks(void **) { run_scatter(3); }
void test_scatter_from_every_root_8_ranks(void **) { run_scatter(8); }

// ---- barrier -----------------------------------------------------------------------------------

// Before barrier k every rank writes k on the board; after it, every rank must see k from all.
void test_barrier_lets_no_rank_pass_before_all_arrive(void **) {
  const int size = 4;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("barrier");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
    for (int k = 1; k <= 200; ++k) {
      if (rank == k % size) usleep(200);  // someone is always late
      board->word[rank].store(k);
      g.barrier(generous());
      for (int r = 0; r < size; ++r)
        if (board->word[r].load() < k) return 1;
    }
    return 0;
  });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

// ---- mixed sequences: step counters and area reuse across operations ----------------------------

// The same pseudo-random program of 400 operations on every rank (reduce and scatter from random
// roots among them), sizes from 1 element to many steps, so area reuse (depth 2) is crossed at
// every possible phase of every algorithm.
void test_mixed_operation_sequence_keeps_ranks_in_step(void **) {
  const int size = 3;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("mixed");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
    std::mt19937 program(1234);  // same seed everywhere: same program
    for (int i = 0; i < 400; ++i) {
      size_t count = 1 + program() % 3000;
      const pstate_dtype_t t = PSTATE_INT32;
      switch (program() % 7) {
        case 0: {
          std::vector<uint8_t> send = inputs(t, rank, count), recv(send.size(), kGuardByte);
          g.all_reduce(send.data(), recv.data(), count, t, PSTATE_SUM, generous());
          if (!check_reduced("all_reduce", t, PSTATE_SUM, size, rank, recv, count)) return 1;
          break;
        }
        case 1: {
          std::vector<uint8_t> send = inputs(t, rank, count), recv(size * count * 4 + kGuard, kGuardByte);
          g.all_gather(send.data(), recv.data(), count, t, generous());
          for (int r = 0; r < size; ++r)
            if (std::memcmp(recv.data() + r * count * 4, inputs(t, r, count).data(), count * 4) != 0) return 2;
          break;
        }
        case 2: {
          std::vector<uint8_t> send = inputs(t, rank, size * count), recv(count * 4 + kGuard, kGuardByte);
          g.reduce_scatter(send.data(), recv.data(), count, t, PSTATE_MAX, generous());
          if (!check_reduced("reduce_scatter", t, PSTATE_MAX, size, rank, recv, count, rank * count)) return 3;
          break;
        }
        case 3: {
          int root = static_cast<int>(program() % size);
          std::vector<uint8_t> want = inputs(t, root, count);
          std::vector<uint8_t> buf = rank == root ? want : std::vector<uint8_t>(want.size(), kGuardByte);
          g.broadcast(buf.data(), count, t, root, generous());
          if (buf != want) {
            size_t k = 0;
            while (buf[k] == want[k]) ++k;
            fprintf(stderr, "rank %d: op %d broadcast from %d count %zu: byte %zu differs\n", rank, i, root, count, k);
            return 4;
          }
          break;
        }
        case 4: {
          int root = static_cast<int>(program() % size);
          std::vector<uint8_t> send = inputs(t, rank, count), recv(send.size(), kGuardByte);
          g.reduce(send.data(), rank == root ? recv.data() : nullptr, count, t, PSTATE_SUM, root, generous());
          if (rank == root && !check_reduced("reduce", t, PSTATE_SUM, size, rank, recv, count)) return 5;
          break;
        }
        case 5: {
          int root = static_cast<int>(program() % size);
          std::vector<uint8_t> send = inputs(t, root, size * count), recv(count * 4 + kGuard, kGuardByte);
          g.scatter(rank == root ? send.data() : nullptr, recv.data(), count, t, root, generous());
          if (std::memcmp(recv.data(), inputs(t, root, count, rank * count).data(), count * 4) != 0) return 6;
          break;
        }
        default: g.barrier(generous());
      }
    }
    return 0;
  });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

// ---- refusals: one rank refuses, every rank fails the call, the group stays in step ------------

// The mixed program again, 3 and 4 ranks, but in about one operation of three a random rank refuses
// its part (arrive with OpKind::kRefused, as Group::refuse does) while the others call the
// operation: those must fail with INVALID_ARGUMENT wherever in their protocol they meet the
// refusal (inline reads, arrival checks, the first step of a staged pipeline, with depth 2 and
// inline depth 3 so that every slot and area is reused right after), the group must not break,
// and every operation after it must be exact, on every rank.
int refusal_program_rank(int rank, int size, const std::string &name, Board *board) {
  PeerWatch watch(board, size, rank);
  ShmGroup g(name, rank, size, generous(), small_chunk_options(&watch));
  std::mt19937 program(4321);  // same seed everywhere: same program
  const pstate_dtype_t t = PSTATE_INT32;
  for (int i = 0; i < 300; ++i) {
    const size_t count = 1 + program() % 3000;
    const int op = static_cast<int>(program() % 7);
    const int root = static_cast<int>(program() % size);
    const int refuser = program() % 3 == 0 ? static_cast<int>(program() % size) : -1;
    if (rank == refuser) {
      const pstate::OpDescriptor refused{static_cast<uint32_t>(pstate::OpKind::kRefused), 0, count, -1, -1, root, 0};
      g.arrive(refused, generous());  // the refusing rank returns; the caller throws its own error
      continue;
    }
    std::string message;
    std::vector<uint8_t> send = inputs(t, rank, size * count), recv(size * count * 4 + kGuard, kGuardByte);
    std::vector<uint8_t> rooted = inputs(t, root, size * count);
    const pstate_status_t s = status_of(
        [&] {
          switch (op) {
            case 0: return g.all_reduce(send.data(), recv.data(), count, t, PSTATE_SUM, generous());
            case 1: return g.all_gather(send.data(), recv.data(), count, t, generous());
            case 2: return g.reduce_scatter(send.data(), recv.data(), count, t, PSTATE_MAX, generous());
            case 3: return g.broadcast(rank == root ? rooted.data() : recv.data(), count, t, root, generous());
            case 4:
              return g.reduce(send.data(), rank == root ? recv.data() : nullptr, count, t, PSTATE_SUM, root,
                              generous());
            case 5: return g.scatter(rank == root ? rooted.data() : nullptr, recv.data(), count, t, root, generous());
            default: return g.barrier(generous());
          }
        },
        &message);
    if (refuser >= 0) {
      if (s != PSTATE_ERR_INVALID_ARGUMENT || message.find("refused its part") == std::string::npos) {
        fprintf(stderr, "rank %d: op %d (kind %d, count %zu): rank %d refused, got %s: %s\n", rank, i, op, count,
                refuser, pstate_status_string(s), message.c_str());
        return 10;
      }
      if (g.broken()) return 11;
      continue;
    }
    if (s != PSTATE_OK) {
      fprintf(stderr, "rank %d: op %d (kind %d, count %zu): %s: %s\n", rank, i, op, count, pstate_status_string(s),
              message.c_str());
      return 12;
    }
    bool ok = true;
    switch (op) {
      case 0: ok = check_reduced("all_reduce", t, PSTATE_SUM, size, rank, recv, count); break;
      case 1:
        for (int r = 0; r < size; ++r)
          ok = ok && std::memcmp(recv.data() + r * count * 4, inputs(t, r, count).data(), count * 4) == 0;
        break;
      case 2: ok = check_reduced("reduce_scatter", t, PSTATE_MAX, size, rank, recv, count, rank * count); break;
      case 3:
        ok = std::memcmp(rank == root ? rooted.data() : recv.data(), inputs(t, root, count).data(), count * 4) == 0;
        break;
      case 4: ok = rank != root || check_reduced("reduce", t, PSTATE_SUM, size, rank, recv, count); break;
      case 5: ok = std::memcmp(recv.data(), inputs(t, root, count, rank * count).data(), count * 4) == 0; break;
      default: break;
    }
    if (!ok) {
      fprintf(stderr, "rank %d: op %d (kind %d, count %zu, root %d): wrong result after a refusal\n", rank, i, op,
              count, root);
      return 13;
    }
  }
  return 0;
}

void run_refusal_program(int size) {
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("refusals");
  auto statuses = run_ranks(size, board, [&](int r) { return refusal_program_rank(r, size, name, board); });
  expect_all_ranks_ok_and_identical(statuses, board, size, false);
  free_shared(board, 1);
}

void test_a_refusing_rank_fails_the_call_everywhere_and_keeps_step_3_ranks(void **) { run_refusal_program(3); }
void test_a_refusing_rank_fails_the_call_everywhere_and_keeps_step_4_ranks(void **) { run_refusal_program(4); }

// ---- the futex sleep path ----------------------------------------------------------------------

// Every wait goes straight to a futex sleep (no spinning, no yielding) and ranks stall at random,
// so sleeps race with wake-ups constantly; a lost wake-up would end only by the 10 s liveness
// timeout, so no sleep may end by timeout.
void run_sleepers_are_woken(bool asymmetric_fences) {
  const int size = 3;
  Board *board = shared_array<Board>(1);
  std::string name = unique_name("sleep");
  auto statuses = run_ranks(size, board, [&](int rank) {
    PeerWatch watch(board, size, rank);
    ShmGroupOptions o = small_chunk_options(&watch);
    o.wait.spin_ns = 0;
    o.wait.yield_ns = 0;
    o.wait.liveness_interval_ms = 10000;
    o.wait.asymmetric_fences = asymmetric_fences;
    ShmGroup g(name, rank, size, generous(), o);
    if (!asymmetric_fences && g.asymmetric_fences()) return 5;
    std::mt19937 rng(rank);
    for (int i = 0; i < 1500; ++i) {
      if (rng() % 4 == 0) usleep(rng() % 100);
      const size_t count = i % 3 == 0 ? 13 : 3000;
      if (i % 3 == 2) {
        g.barrier(generous());
        continue;
      }
      std::vector<uint8_t> send = inputs(PSTATE_INT32, rank, count), recv(send.size(), kGuardByte);
      g.all_reduce(send.data(), recv.data(), count, PSTATE_INT32, PSTATE_SUM, generous());
      if (!check_reduced("all_reduce", PSTATE_INT32, PSTATE_SUM, size, rank, recv, count)) return 1;
    }
    board->hash[rank] = g.wait_stats().sleeps;
    board->word[rank] = static_cast<int64_t>(g.wait_stats().sleep_timeouts);
    return 0;
  });
  assert_true(all_ok(statuses));
  uint64_t sleeps = 0;
  for (int r = 0; r < size; ++r) {
    assert_int_equal(board->word[r].load(), 0);
    sleeps += board->hash[r].load();
  }
  assert_true(sleeps > 100);
  assert_int_equal(leftover_segments(), 0);
  free_shared(board, 1);
}

void test_sleeping_waiters_are_woken_with_asymmetric_fences(void **) { run_sleepers_are_woken(true); }
void test_sleeping_waiters_are_woken_with_real_fences(void **) { run_sleepers_are_woken(false); }

// ---- threads as ranks --------------------------------------------------------------------------

void test_threads_as_ranks_all_reduce_in_one_process(void **) {
  const int size = 4;
  const size_t count = 20000;
  std::string name = unique_name("threads");
  std::vector<std::vector<uint8_t>> results(size);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        ShmGroupOptions o;
        o.label = "threads";
        o.chunk_bytes = 8192;
        ShmGroup g(name, rank, size, Deadline::after_ms(30000), o);
        std::vector<uint8_t> send = inputs(PSTATE_FLOAT32, rank, count);
        results[rank].assign(send.size(), kGuardByte);
        g.all_reduce(send.data(), results[rank].data(), count, PSTATE_FLOAT32, PSTATE_SUM, Deadline::after_ms(30000));
      } catch (const std::exception &e) {
        fprintf(stderr, "thread rank %d: %s\n", rank, e.what());
        ++failures;
      }
    });
  for (auto &t : threads) t.join();
  assert_int_equal(failures.load(), 0);
  for (int rank = 0; rank < size; ++rank) {
    assert_true(check_reduced("all_reduce", PSTATE_FLOAT32, PSTATE_SUM, size, rank, results[rank], count));
    assert_memory_equal(results[rank].data(), results[0].data(), count * 4);
  }
  assert_int_equal(leftover_segments(), 0);
}

// Staging copies of adaptive_stage_bytes or more, and all_reduce's fold of a slice that large,
// each pick one of two ways (ordinary or non-temporal stores; fold into the area or into recv)
// by measured cost and try the other way every 32nd time: after enough calls every way has been
// measured on every rank, and results are exact whichever way was taken. In place with more than
// 2 ranks the fold never goes into recv (it would overwrite an input it reads later), so only
// the stores of the staging copies are chosen there.
void run_adaptive(int size, bool in_place) {
  const size_t count = 64 * 1024;  // 256 KiB of float32: several steps of 64 KiB areas
  std::string name = unique_name("adaptive");
  std::vector<double> costs(static_cast<size_t>(size) * 4, 0.0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        ShmGroupOptions o;
        o.label = "adaptive";
        o.chunk_bytes = 64 * 1024;
        o.adaptive_stage_bytes = 4096;
        ShmGroup g(name, rank, size, generous(), o);
        const std::vector<uint8_t> send = inputs(PSTATE_FLOAT32, rank, count);
        std::vector<uint8_t> gathered(size * count * 4 + kGuard, kGuardByte), reduced(count * 4 + kGuard, kGuardByte);
        for (int iter = 0; iter < 40; ++iter) {
          g.all_gather(send.data(), gathered.data(), count, PSTATE_FLOAT32, generous());
          for (int r = 0; r < size; ++r)
            if (std::memcmp(gathered.data() + r * count * 4, inputs(PSTATE_FLOAT32, r, count).data(), count * 4) != 0)
              throw std::runtime_error("all_gather block of rank " + std::to_string(r) + " wrong");
          if (in_place) std::memcpy(reduced.data(), send.data(), count * 4);
          g.all_reduce(in_place ? reduced.data() : send.data(), reduced.data(), count, PSTATE_FLOAT32, PSTATE_SUM,
                       generous());
          if (!check_reduced("all_reduce", PSTATE_FLOAT32, PSTATE_SUM, size, rank, reduced, count))
            throw std::runtime_error("all_reduce result wrong at iteration " + std::to_string(iter));
          if (!guard_intact(gathered, size * count * 4) || !guard_intact(reduced, count * 4))
            throw std::runtime_error("wrote past the result");
        }
        for (int kind = 0; kind < 2; ++kind) {
          costs[rank * 4 + kind] = g.stage_cost_per_kib(kind);
          costs[rank * 4 + 2 + kind] = g.reduce_cost_per_kib(kind);
        }
      } catch (const std::exception &e) {
        fprintf(stderr, "thread rank %d: %s\n", rank, e.what());
        ++failures;
      }
    });
  for (auto &t : threads) t.join();
  assert_int_equal(failures.load(), 0);
  const bool fold_chosen = !in_place || size == 2;
  for (int rank = 0; rank < size; ++rank) {
    assert_true(costs[rank * 4] > 0 && costs[rank * 4 + 1] > 0);
    if (fold_chosen)
      assert_true(costs[rank * 4 + 2] > 0 && costs[rank * 4 + 3] > 0);
    else
      assert_true(costs[rank * 4 + 2] == 0 && costs[rank * 4 + 3] == 0);
  }
  assert_int_equal(leftover_segments(), 0);
}

void test_adaptive_paths_2_ranks_are_all_measured_and_exact(void **) { run_adaptive(2, false); }
void test_adaptive_paths_2_ranks_in_place_are_all_measured_and_exact(void **) { run_adaptive(2, true); }
void test_adaptive_paths_3_ranks_are_all_measured_and_exact(void **) { run_adaptive(3, false); }
void test_adaptive_paths_3_ranks_in_place_never_fold_into_recv(void **) { run_adaptive(3, true); }

// A medium all_gather (steps shorter than adaptive_stage_bytes) uses the staging stores group
// rank 0 chose for the group from the time of its whole calls: after 40 calls rank 0 has timed
// both kinds (so every rank used both: they follow rank 0), no other rank timed anything, and
// every result was exact (default options: 16 KiB per rank is one step of 16 KiB).
void test_medium_all_gather_follows_rank_0s_store_choice_and_stays_exact(void **) {
  const int size = 3;
  const size_t count = 4096;  // float32: 16 KiB per rank
  std::string name = unique_name("medium");
  std::vector<double> costs(size * 2, 0.0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        ShmGroup g(name, rank, size, generous(), ShmGroupOptions{});
        const std::vector<uint8_t> send = inputs(PSTATE_FLOAT32, rank, count);
        std::vector<uint8_t> gathered(size * count * 4 + kGuard, kGuardByte);
        for (int iter = 0; iter < 40; ++iter) {
          g.all_gather(send.data(), gathered.data(), count, PSTATE_FLOAT32, generous());
          for (int r = 0; r < size; ++r)
            if (std::memcmp(gathered.data() + r * count * 4, inputs(PSTATE_FLOAT32, r, count).data(), count * 4) != 0)
              throw std::runtime_error("all_gather block of rank " + std::to_string(r) + " wrong");
          if (!guard_intact(gathered, size * count * 4)) throw std::runtime_error("wrote past the result");
        }
        for (int kind = 0; kind < 2; ++kind) costs[rank * 2 + kind] = g.gather_cost_per_kib(kind);
      } catch (const std::exception &e) {
        fprintf(stderr, "thread rank %d: %s\n", rank, e.what());
        ++failures;
      }
    });
  for (auto &t : threads) t.join();
  assert_int_equal(failures.load(), 0);
  assert_true(costs[0] > 0 && costs[1] > 0);
  for (int rank = 1; rank < size; ++rank) assert_true(costs[rank * 2] == 0 && costs[rank * 2 + 1] == 0);
  assert_int_equal(leftover_segments(), 0);
}

// ---- a group of one, and argument errors -------------------------------------------------------

void test_group_of_one_copies_and_leaves_nothing_in_dev_shm(void **) {
  ShmGroup g(unique_name("one"), 0, 1, generous());
  assert_int_equal(leftover_segments(), 0);
  assert_true(g.describe().find("1 ranks") != std::string::npos);
  std::vector<uint8_t> send = inputs(PSTATE_INT64, 0, 100), recv(send.size(), 0);
  g.all_reduce(send.data(), recv.data(), 100, PSTATE_INT64, PSTATE_AVG, generous());
  assert_memory_equal(send.data(), recv.data(), 800);
  std::vector<uint8_t> reduced(send.size(), 0), scattered(send.size(), 0);
  g.reduce(send.data(), reduced.data(), 100, PSTATE_INT64, PSTATE_PROD, 0, generous());
  assert_memory_equal(send.data(), reduced.data(), 800);
  g.scatter(send.data(), scattered.data(), 100, PSTATE_INT64, 0, generous());
  assert_memory_equal(send.data(), scattered.data(), 800);
  g.barrier(generous());
}

void test_fp8_reduction_is_unsupported(void **) {
  ShmGroup g(unique_name("fp8"), 0, 1, generous());
  uint8_t buf[4] = {1, 2, 3, 4};
  assert_int_equal(status_of([&] { g.all_reduce(buf, buf, 4, PSTATE_FP8_E4M3, PSTATE_SUM, generous()); }),
                   PSTATE_ERR_UNSUPPORTED);
  assert_int_equal(status_of([&] { g.reduce_scatter(buf, buf, 4, PSTATE_FP8_E5M2, PSTATE_MAX, generous()); }),
                   PSTATE_ERR_UNSUPPORTED);
  assert_int_equal(status_of([&] { g.reduce(buf, buf, 4, PSTATE_FP8_E4M3, PSTATE_MIN, 0, generous()); }),
                   PSTATE_ERR_UNSUPPORTED);
  assert_false(g.broken());  // refusing a call does not break the group
}

// (Out-of-list enum values stay inside the enums' value range: anything else is UB in C++.)
void test_bad_arguments_are_invalid_argument(void **) {
  ShmGroup g(unique_name("args"), 0, 1, generous());
  uint8_t buf[8] = {};
  assert_int_equal(status_of([&] { g.all_reduce(nullptr, buf, 2, PSTATE_INT32, PSTATE_SUM, generous()); }),
                   PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { g.all_reduce(buf, buf, 2, static_cast<pstate_dtype_t>(15), PSTATE_SUM, generous()); }),
                   PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { g.all_reduce(buf, buf, 2, PSTATE_INT32, static_cast<pstate_reduce_op_t>(7), generous()); }),
                   PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { g.broadcast(buf, 2, PSTATE_INT32, 1, generous()); }), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { g.reduce(buf, buf, 2, PSTATE_INT32, PSTATE_SUM, 1, generous()); }),
                   PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { g.scatter(buf, buf, 2, PSTATE_INT32, -1, generous()); }),
                   PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { g.scatter(buf, nullptr, 2, PSTATE_INT32, 0, generous()); }),
                   PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([] { ShmGroup bad("no-slash", 0, 1, generous()); }), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([] { ShmGroup bad(unique_name("rank"), 2, 2, generous()); }), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(leftover_segments(), 0);
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_of_one_copies_and_leaves_nothing_in_dev_shm),
      cmocka_unit_test(test_fp8_reduction_is_unsupported),
      cmocka_unit_test(test_bad_arguments_are_invalid_argument),
      cmocka_unit_test(test_all_reduce_2_ranks_every_dtype_and_op_matches_reference),
      cmocka_unit_test(test_all_reduce_3_ranks_every_dtype_and_op_matches_reference),
      cmocka_unit_test(test_all_reduce_4_ranks_every_dtype_and_op_matches_reference),
      cmocka_unit_test(test_all_reduce_8_ranks_every_dtype_and_op_matches_reference),
      cmocka_unit_test(test_all_reduce_64MiB_float32_sum_2_ranks),
      cmocka_unit_test(test_all_reduce_odd_16MiB_float32_avg_in_place_4_ranks),
      cmocka_unit_test(test_all_gather_2_ranks_matches_inputs),
      cmocka_unit_test(test_all_gather_3_ranks_matches_inputs),
      cmocka_unit_test(test_all_gather_8_ranks_matches_inputs),
      cmocka_unit_test(test_reduce_scatter_3_ranks_every_dtype_and_op_matches_reference),
      cmocka_unit_test(test_reduce_scatter_2_4_8_ranks_float32_int64_bfloat16_match_reference),
      cmocka_unit_test(test_broadcast_from_every_root_2_ranks),
      cmocka_unit_test(test_broadcast_from_every_root_3_ranks),
      cmocka_unit_test(test_broadcast_from_every_root_8_ranks),
      cmocka_unit_test(test_reduce_3_ranks_every_root_dtype_and_op_matches_reference),
      cmocka_unit_test(test_reduce_2_4_8_ranks_every_root_float32_int64_bfloat16_match_reference),
      cmocka_unit_test(test_reduce_odd_16MiB_float32_avg_in_place_to_the_last_of_4_ranks),
      cmocka_unit_test(test_scatter_from_every_root_2_ranks),
      cmocka_unit_test(test_scatter_from_every_root_3_ranks),
      cmocka_unit_test(test_scatter_from_every_root_8_ranks),
      cmocka_unit_test(test_barrier_lets_no_rank_pass_before_all_arrive),
      cmocka_unit_test(test_mixed_operation_sequence_keeps_ranks_in_step),
      cmocka_unit_test(test_a_refusing_rank_fails_the_call_everywhere_and_keeps_step_3_ranks),
      cmocka_unit_test(test_a_refusing_rank_fails_the_call_everywhere_and_keeps_step_4_ranks),
      cmocka_unit_test(test_threads_as_ranks_all_reduce_in_one_process),
    cmocka_unit_test(test_adaptive_paths_2_ranks_are_all_measured_and_exact),
    cmocka_unit_test(test_adaptive_paths_2_ranks_in_place_are_all_measured_and_exact),
    cmocka_unit_test(test_adaptive_paths_3_ranks_are_all_measured_and_exact),
    cmocka_unit_test(test_adaptive_paths_3_ranks_in_place_never_fold_into_recv),
    cmocka_unit_test(test_medium_all_gather_follows_rank_0s_store_choice_and_stays_exact),
      cmocka_unit_test(test_sleeping_waiters_are_woken_with_asymmetric_fences),
      cmocka_unit_test(test_sleeping_waiters_are_woken_with_real_fences),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
