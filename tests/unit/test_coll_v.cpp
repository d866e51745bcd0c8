// test_coll_v.cpp — the variable-size collectives allgatherv_ring and reduce_scatterv_ring over the
// thread harness: every group size 1..9 × counts arrays with zeros in every place (all zero, one
// rank only, every third rank empty, uneven) × dtypes of every element size (allgatherv: bytes
// compared exactly; reduce_scatterv: every reducible dtype × op against the independent
// reference of tests/support/coll_cases.hpp), in place and out of place, deep pipelines (tiny
// chunks), and no zero-byte message ever posted (a Channel wrapper refuses them). Under ASan and
// TSan the sweeps take fewer dtypes and ops (tests/support/coll_cases.hpp, kSweep*).
#include "coll/algorithms.hpp"
#include "coll_cases.hpp"
#include "thread_channel.hpp"

#include <string>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace ptest;
using pstate::Channel;

namespace {

constexpr uint32_t kTagBase = 0x7FFF0000;

// Forwards to the harness channel and throws on a zero-byte message (algorithms.hpp: never
// posted; an empty part must cost nothing).
class NoEmptyMessages final : public Channel {
 public:
  explicit NoEmptyMessages(Channel &inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Request isend(int peer, const void *buf, size_t bytes, uint32_t tag) override {
    refuse_empty(bytes, "isend");
    return inner_.isend(peer, buf, bytes, tag);
  }
  Request irecv(int peer, void *buf, size_t bytes, uint32_t tag) override {
    refuse_empty(bytes, "irecv");
    return inner_.irecv(peer, buf, bytes, tag);
  }
  Request irecv_any_size(int peer, std::vector<uint8_t> *out, uint32_t tag) override {
    return inner_.irecv_any_size(peer, out, tag);
  }
  void wait_all(const Request *requests, size_t n) override { inner_.wait_all(requests, n); }

 private:
  static void refuse_empty(size_t bytes, const char *what) {
    if (bytes == 0) pstate::throw_error(PSTATE_ERR_INTERNAL, what, " of 0 bytes");
  }
  Channel &inner_;
};

// The counts arrays of the sweeps, for a group of p.
std::vector<std::vector<size_t>> count_patterns(int p) {
  const auto n = static_cast<size_t>(p);
  std::vector<std::vector<size_t>> out;
  out.emplace_back(n, 0);  // all empty
  std::vector<size_t> last_only(n, 0);
  last_only[n - 1] = 1000;
  out.push_back(last_only);
  std::vector<size_t> thirds(n), uneven(n), first_empty(n);
  for (size_t b = 0; b < n; ++b) {
    thirds[b] = b % 3 == 1 ? 0 : 1 + (b * 37) % 101;
    uneven[b] = b * 97 + 1;
    first_empty[b] = b == 0 ? 0 : 7 + b;
  }
  out.push_back(thirds);
  out.push_back(uneven);
  out.push_back(first_empty);
  return out;
}

std::string describe(const char *algo, const std::vector<size_t> &counts, pstate_dtype_t d, int op, bool in_place,
                     size_t chunk) {
  std::string s = std::string(algo) + " counts [";
  for (size_t i = 0; i < counts.size(); ++i) s += (i ? "," : "") + std::to_string(counts[i]);
  s += std::string("] ") + pstate_dtype_name(d);
  if (op >= 0) s += std::string(" ") + pstate_reduce_op_name(static_cast<pstate_reduce_op_t>(op));
  if (in_place) s += " in place";
  if (chunk != 0) s += " chunk " + std::to_string(chunk);
  return s;
}

std::vector<size_t> offsets_of(const std::vector<size_t> &counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t b = 0; b < counts.size(); ++b) off[b + 1] = off[b] + counts[b];
  return off;
}

std::string run_allgatherv(const std::vector<size_t> &counts, pstate_dtype_t d, bool in_place) {
  const int p = static_cast<int>(counts.size());
  const size_t es = esize_of(d);
  const auto off = offsets_of(counts);
  const size_t total = off.back();
  // part of rank r: byte j = r * 31 + j (mod 251): every part and position distinct.
  auto byte_of = [](size_t r, size_t j) { return static_cast<uint8_t>((r * 31 + j) % 251); };
  std::vector<std::vector<uint8_t>> send(counts.size()),
      recv(counts.size(), std::vector<uint8_t>(total * es + 8, 0xEE));
  for (size_t r = 0; r < counts.size(); ++r) {
    send[r].resize(counts[r] * es);
    for (size_t j = 0; j < send[r].size(); ++j) send[r][j] = byte_of(r, j);
    if (in_place)
      for (size_t j = 0; j < send[r].size(); ++j) recv[r][off[r] * es + j] = byte_of(r, j);
  }
  std::string err = run_ranks(p, [&](Channel &inner) {
    NoEmptyMessages ch(inner);
    const auto r = static_cast<size_t>(ch.rank());
    const void *src = in_place ? recv[r].data() + off[r] * es : send[r].data();
    pstate::coll::allgatherv_ring(ch, src, recv[r].data(), counts.data(), d, kTagBase);
  });
  const std::string what = describe("allgatherv_ring", counts, d, -1, in_place, 0);
  if (!err.empty()) return what + ": " + err;
  for (size_t r = 0; r < counts.size(); ++r) {
    for (size_t b = 0; b < counts.size(); ++b)
      for (size_t j = 0; j < counts[b] * es; ++j)
        if (recv[r][off[b] * es + j] != byte_of(b, j))
          return mismatch(what, static_cast<int>(r), off[b] * es + j, recv[r][off[b] * es + j], byte_of(b, j));
    for (size_t j = total * es; j < total * es + 8; ++j)
      if (recv[r][j] != 0xEE) return what + ": wrote past recv on rank " + std::to_string(r);
  }
  return "";
}

// Every rank's send holds sum(counts) elements: rank r's element i = input_bits(d, op, r, i).
std::string run_reduce_scatterv(const std::vector<size_t> &counts, pstate_dtype_t d, pstate_reduce_op_t op,
                                bool in_place, size_t chunk_bytes) {
  const int p = static_cast<int>(counts.size());
  const size_t es = esize_of(d);
  const auto off = offsets_of(counts);
  auto in = rank_inputs(d, op, p, off.back());
  const auto original = in;
  std::vector<std::vector<uint8_t>> out(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) out[r].assign(counts[r] * es + 8, 0xEE);
  std::string err = run_ranks(p, [&](Channel &inner) {
    NoEmptyMessages ch(inner);
    const auto r = static_cast<size_t>(ch.rank());
    void *recv = in_place ? in[r].data() + off[r] * es : out[r].data();
    if (chunk_bytes == 0)
      pstate::coll::reduce_scatterv_ring(ch, in[r].data(), recv, counts.data(), d, op, kTagBase);
    else
      pstate::coll::reduce_scatterv_ring_chunked(ch, in[r].data(), recv, counts.data(), d, op, kTagBase, chunk_bytes);
  });
  const std::string what = describe("reduce_scatterv_ring", counts, d, op, in_place, chunk_bytes);
  if (!err.empty()) return what + ": " + err;
  for (size_t r = 0; r < counts.size(); ++r) {
    const uint8_t *result = in_place ? in[r].data() + off[r] * es : out[r].data();
    for (size_t i = 0; i < counts[r]; ++i) {
      const uint64_t want = fold_ranks(original, d, op, off[r] + i), got = get_bits(result, i, es);
      if (got != want) return mismatch(what, static_cast<int>(r), i, got, want);
    }
    if (!in_place && (out[r][counts[r] * es] != 0xEE || out[r][counts[r] * es + 7] != 0xEE))
      return what + ": wrote past recv on rank " + std::to_string(r);
    // Only rank r's own part of its send may change (in place: the result lands there).
    for (size_t i = 0; i < off.back(); ++i) {
      if (in_place && i >= off[r] && i < off[r + 1]) continue;
      if (get_bits(in[r].data(), i, es) != get_bits(original[r].data(), i, es))
        return what + ": send changed on rank " + std::to_string(r) + " at element " + std::to_string(i);
    }
  }
  return "";
}

}  // namespace

static void test_allgatherv_packs_every_part_for_every_group_and_counts(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (const auto &counts : count_patterns(p))
      for (pstate_dtype_t d : {PSTATE_UINT8, PSTATE_BFLOAT16, PSTATE_FLOAT32, PSTATE_INT64, PSTATE_FP8_E4M3})
        for (bool in_place : {false, true}) {
          std::string err = run_allgatherv(counts, d, in_place);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

static void test_reduce_scatterv_matches_reference_for_every_group_counts_dtype_op(void **) {
  for (int p : {1, 2, 3, 4, 7, kMaxGroup})
    for (const auto &counts : count_patterns(p))
      for (pstate_dtype_t d : kSweepDtypes)
        for (pstate_reduce_op_t op : kSweepOps) {
          std::string err = run_reduce_scatterv(counts, d, op, false, 0);
          if (!err.empty()) fail_msg("%s", err.c_str());
        }
}

static void test_reduce_scatterv_in_place_keeps_own_part_until_last_step(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (const auto &counts : count_patterns(p))
      for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_MIN, PSTATE_AVG}) {
        std::string err = run_reduce_scatterv(counts, PSTATE_FLOAT32, op, true, 0);
        if (!err.empty()) fail_msg("%s", err.c_str());
      }
}

// Parts larger than recv pass through the two scratch buffers; parts that fit use recv: a part
// list where large and small blocks alternate crosses every choice of partial().
static void test_reduce_scatterv_with_tiny_chunks_and_alternating_sizes(void **) {
  for (int p = 2; p <= kMaxGroup; ++p) {
    std::vector<size_t> alternating(static_cast<size_t>(p));
    for (size_t b = 0; b < alternating.size(); ++b) alternating[b] = b % 2 ? 301 : 3 + b;
    for (const auto &counts : {alternating, count_patterns(p)[3]})
      for (pstate_dtype_t d : {PSTATE_UINT8, PSTATE_BFLOAT16, PSTATE_FLOAT64})
        for (pstate_reduce_op_t op : {PSTATE_SUM, PSTATE_MAX, PSTATE_AVG})
          for (bool in_place : {false, true}) {
            std::string err = run_reduce_scatterv(counts, d, op, in_place, 40);
            if (!err.empty()) fail_msg("%s", err.c_str());
          }
  }
}

static void test_reduce_scatterv_fp8_is_unsupported_before_any_message(void **) {
  std::vector<uint8_t> a(64), b(64);
  const size_t counts[3] = {1, 2, 3};
  std::string err = run_ranks(3, [&](Channel &ch) {
    try {
      pstate::coll::reduce_scatterv_ring(ch, a.data(), b.data(), counts, PSTATE_FP8_E4M3, PSTATE_SUM, kTagBase);
    } catch (const pstate::Error &e) {
      if (e.status() == PSTATE_ERR_UNSUPPORTED) return;
      throw;
    }
    pstate::throw_error(PSTATE_ERR_INTERNAL, "fp8 reduce_scatterv did not throw");
  });
  if (!err.empty()) fail_msg("%s", err.c_str());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allgatherv_packs_every_part_for_every_group_and_counts),
      cmocka_unit_test(test_reduce_scatterv_matches_reference_for_every_group_counts_dtype_op),
      cmocka_unit_test(test_reduce_scatterv_in_place_keeps_own_part_until_last_step),
      cmocka_unit_test(test_reduce_scatterv_with_tiny_chunks_and_alternating_sizes),
      cmocka_unit_test(test_reduce_scatterv_fp8_is_unsupported_before_any_message),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
