// fuzz_layout.cpp — libFuzzer target for the layout config: pstate::layout::validate and
// Layout (src/layout/layout.hpp), i.e. what pstate_initialize_model_parallel and
// pstate_layout_create do with a user's sizes.
//
// Input: a mode byte, then the world size and the eight sizes (tp, pp, ep, attn_dp, attn_cp,
// moe_dp, dcp, shared_experts_tp), each one byte (0..239) or, after a byte >= 240, four raw
// bytes (any int: negative, huge, overflowing products). Mode bit 0 makes world = tp * pp so
// valid layouts are common.
// Properties: validate() and Layout agree (both accept or both refuse with INVALID_ARGUMENT);
// for an accepted layout (world <= 4096 to keep runs fast), every kind's groups partition the
// world (each rank once, ascending, group_of consistent), aliases have their canonical kind's
// groups, and tp, pp, attn_tp, attn_cp, moe_ep and moe_tp groups equal a reference computed
// here from SGLang's formulas, independently of layout.cpp: rank r = block * tp + w with
//   w = (d * attn_cp + c) * attn_tp + t   (attention view)
//   w = (m * ep + e) * moe_tp + t         (MoE view)
// and a group collects the ranks that agree on every coordinate but its own.
#include "layout/layout.hpp"
#include "fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace pstate;
using namespace pstate::layout;

namespace {

class Reader {
 public:
  Reader(const uint8_t *d, size_t n) : d_(d), n_(n) {}
  int size_field() {
    uint8_t b = byte();
    if (b < 240) return b;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{byte()} << (8 * i);
    int out;
    std::memcpy(&out, &v, sizeof out);
    return out;
  }
  uint8_t byte() { return at_ < n_ ? d_[at_++] : 1; }

 private:
  const uint8_t *d_;
  size_t n_, at_ = 0;
};

// The reference group of `rank` for a kind whose coordinate is `axis` of (outer, axis, inner)
// inside one block of tp ranks, e.g. attn_cp: outer attn_dp, axis attn_cp, inner attn_tp.
std::vector<int> reference_line(int rank, int block, int outer, int axis, int inner) {
  (void)outer;
  int base = rank / block * block, w = rank % block;
  int o = w / (axis * inner), t = w % inner;
  std::vector<int> out;
  for (int k = 0; k < axis; ++k) out.push_back(base + (o * axis + k) * inner + t);
  return out;
}

void expect_group(const Layout &l, pstate_group_kind_t kind, int rank, const std::vector<int> &want) {
  auto got = l.group_containing(kind, rank);
  FUZZ_CHECK(got.size() == want.size() && std::equal(got.begin(), got.end(), want.begin()),
             "%s group of rank %d differs from the reference", pstate_group_kind_name(kind), rank);
}

void check_partition(const Layout &l, pstate_group_kind_t kind) {
  int world = l.world_size();
  const Partition &p = l.groups(kind);
  FUZZ_CHECK(p.group_count() * static_cast<size_t>(p.group_size()) == static_cast<size_t>(world),
             "%s: %zu groups of %d do not cover %d ranks", pstate_group_kind_name(kind), p.group_count(),
             p.group_size(), world);
  std::vector<int> seen(static_cast<size_t>(world), 0);
  for (size_t g = 0; g < p.group_count(); ++g) {
    auto members = p.group(g);
    for (size_t k = 0; k < members.size(); ++k) {
      int r = members[k];
      FUZZ_CHECK(r >= 0 && r < world && seen[static_cast<size_t>(r)]++ == 0, "%s: rank %d twice or outside",
                 pstate_group_kind_name(kind), r);
      FUZZ_CHECK(k == 0 || members[k - 1] < r, "%s: group %zu not ascending", pstate_group_kind_name(kind), g);
      FUZZ_CHECK(p.group_of(r) == g && l.group_of(kind, r) == g, "%s: group_of(%d) != %zu",
                 pstate_group_kind_name(kind), r, g);
      FUZZ_CHECK(p.rank_in_group(r) == static_cast<int>(k), "%s: rank_in_group(%d)", pstate_group_kind_name(kind), r);
    }
  }
}

void check_layout(const Layout &l) {
  const ParallelConfig &c = l.config();
  int world = l.world_size(), attn_tp = l.attn_tp_size(), moe_tp = l.moe_tp_size();
  for (int k = 0; k < kKindCount; ++k) {
    auto kind = static_cast<pstate_group_kind_t>(k);
    if (!l.has(kind)) {
      FUZZ_CHECK(l.group_count(kind) == 0, "absent kind %d has groups", k);
      continue;
    }
    check_partition(l, kind);
    pstate_group_kind_t canon = l.canonical(kind);
    FUZZ_CHECK(l.canonical(canon) == canon, "alias chain of %d not followed to its end", k);
    FUZZ_CHECK(&l.groups(kind) == &l.groups(canon), "alias %d does not share its canonical groups", k);
  }
  FUZZ_CHECK(l.group_count(PSTATE_GROUP_WORLD) == 1 && l.groups(PSTATE_GROUP_SELF_PP).group_size() == 1,
             "world/self_pp shape");
  // Every rank of small worlds; about 64 spread ranks of large ones (a group costs its size).
  int step = world <= 256 ? 1 : world / 64;
  for (int r = 0; r < world; r += step) {
    expect_group(l, PSTATE_GROUP_TP, r, reference_line(r, c.tp, 1, c.tp, 1));
    expect_group(l, PSTATE_GROUP_PP, r, reference_line(r, world, 1, c.pp, c.tp));
    expect_group(l, PSTATE_GROUP_ATTN_TP, r, reference_line(r, c.tp, c.attn_dp * c.attn_cp, attn_tp, 1));
    expect_group(l, PSTATE_GROUP_ATTN_CP, r, reference_line(r, c.tp, c.attn_dp, c.attn_cp, attn_tp));
    expect_group(l, PSTATE_GROUP_MOE_EP, r, reference_line(r, c.tp, c.moe_dp, c.ep, moe_tp));
    expect_group(l, PSTATE_GROUP_MOE_TP, r, reference_line(r, c.tp, c.moe_dp * c.ep, moe_tp, 1));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Reader in(data, size);
  uint8_t mode = in.byte();
  int world = in.size_field();
  ParallelConfig c;
  c.tp = in.size_field();
  c.pp = in.size_field();
  c.ep = in.size_field();
  c.attn_dp = in.size_field();
  c.attn_cp = in.size_field();
  c.moe_dp = in.size_field();
  c.dcp = in.size_field();
  c.shared_experts_tp = in.size_field();
  if ((mode & 1) && c.tp > 0 && c.pp > 0 && static_cast<long long>(c.tp) * c.pp <= kMaxWorldSize) world = c.tp * c.pp;

  bool valid = fuzz::accepts([&] { validate(world, c); });
  if (!valid || world > 4096) {
    if (!valid) FUZZ_CHECK(!fuzz::accepts([&] { Layout l(world, c); }), "Layout accepted what validate refused");
    return 0;
  }
  bool built = fuzz::accepts([&] {
    Layout l(world, c);
    check_layout(l);
  });
  FUZZ_CHECK(built, "validate accepted world %d but Layout refused it", world);
  return 0;
}
