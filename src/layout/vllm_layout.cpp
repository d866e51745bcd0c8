// vllm_layout.cpp — computes vLLM's groups (its initialize_model_parallel) for one world and config.
//
// vLLM lays the world out as a row-major grid, rank = its flat index:
//     all_ranks = arange(world).reshape(ExternalDP, dp, pp, pcp, tp)      (axes 0..4)
// and cuts each kind's groups from it the same way: move the kind's axes to the end
// (transpose), flatten everything before them (reshape(-1, size)), and take the rows (unbind(0)):
//   tp    all_ranks.view(-1, tp)                            axes as they are, the last one
//   dcp   all_ranks.reshape(-1, dcp)                        the tp axis cut into blocks of dcp
//   pcp   all_ranks.transpose(3, 4).reshape(-1, pcp)        axis 3 last
//   pp    all_ranks.transpose(2, 4).reshape(-1, pp)         axis 2 last
//   dp    all_ranks.transpose(1, 4).reshape(-1, dp)         axis 1 last
//   ep    all_ranks.transpose(1, 2).reshape(-1, dp*pcp*tp)  axes 1, 3, 4 last: one PP stage
//   eplb  the same ranks as ep, a group object of its own
// The rows come out in the order of the axes left in front, after the transpose: a pp group
// fixes (ExternalDP, dp, tp, pcp) in that order, so its groups are listed tp before pcp, a dp
// group fixes (ExternalDP, tp, pp, pcp). That is the order vLLM builds its group_ranks list in,
// and so the order of pstate's group indices and names ("pp:0", "pp:1"). Inside a row the ranks
// ascend (every axis kept in a row keeps its order, and the grid is row-major), which Partition
// checks. dcp exists when dcp > 1 (a size of 1 would be singletons), ep and eplb for MoE models
// (vLLM: "Don't create EP group for dense models"). vLLM has no aliasing: every kind that
// exists is its own GroupCoordinator, even where its ranks equal another kind's.
#include "layout/layout.hpp"

#include <vector>

namespace pstate::layout {

namespace {

// The rows of `grid.permute(order).reshape(-1, row)`, row = the product of the last `row_axes`
// axes of the permuted grid: a grid of `shape` (row-major, rank = flat index) read with its axes
// in `order`, odometer-style, the last axis fastest.
std::shared_ptr<const Partition> rows(int world, std::vector<int> shape, std::vector<size_t> order, size_t row_axes) {
  const size_t n = shape.size();
  std::vector<int> stride(n, 1);
  for (size_t a = n - 1; a > 0; --a) stride[a - 1] = stride[a] * shape[a];
  int row = 1;
  for (size_t k = n - row_axes; k < n; ++k) row *= shape[order[k]];

  std::vector<int> flat;
  flat.reserve(static_cast<size_t>(world));
  std::vector<int> index(n, 0);  // position along each permuted axis
  for (int r = 0; r < world; ++r) {
    int rank = 0;
    for (size_t k = 0; k < n; ++k) rank += index[k] * stride[order[k]];
    flat.push_back(rank);
    for (size_t k = n; k-- > 0;) {  // the next position: the last permuted axis turns fastest
      if (++index[k] < shape[order[k]]) break;
      index[k] = 0;
    }
  }
  return std::make_shared<const Partition>(world, row, std::move(flat));
}

}  // namespace

void Layout::build_vllm() {
  const ParallelConfig &c = cfg_;
  const int w = world_size_;
  const std::vector<int> grid = {c.external_dp(w), c.dp, c.pp, c.pcp, c.tp};  // axes 0..4

  add(PSTATE_GROUP_WORLD, rows(w, {w}, {0}, 1));
  add(PSTATE_GROUP_TP, rows(w, grid, {0, 1, 2, 3, 4}, 1));
  if (c.dcp > 1)  // the tp axis as (tp / dcp, dcp): reshape(-1, dcp) of the grid
    add(PSTATE_GROUP_DCP, rows(w, {c.external_dp(w), c.dp, c.pp, c.pcp, c.tp / c.dcp, c.dcp}, {0, 1, 2, 3, 4, 5}, 1));
  add(PSTATE_GROUP_PCP, rows(w, grid, {0, 1, 2, 4, 3}, 1));  // transpose(3, 4)
  add(PSTATE_GROUP_PP, rows(w, grid, {0, 1, 4, 3, 2}, 1));   // transpose(2, 4)
  add(PSTATE_GROUP_DP, rows(w, grid, {0, 4, 2, 3, 1}, 1));   // transpose(1, 4)
  if (c.moe_model) {
    auto ep = rows(w, grid, {0, 2, 1, 3, 4}, 3);  // transpose(1, 2), rows of dp * pcp * tp
    add(PSTATE_GROUP_EP, ep);
    add(PSTATE_GROUP_EPLB, ep);  // the same ranks; src/group/ makes it a group of its own (not an alias)
  }
}

}  // namespace pstate::layout
