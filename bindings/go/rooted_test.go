package pstate_test

import (
	"errors"
	"testing"

	"pstate.dev/pstate"
)

// Reduce and Scatter on 3 ranks from every root: into a new slice, in place on the root,
// Buffer{} for the buffer a rank other than the root does not use; then the argument errors the
// binding adds, on each rank's group of one (every rank is the root, so no peer waits).
func TestReduceAndScatterFromEveryRootThreeRanks(t *testing.T) {
	onRanks(t, 3, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		must(t, ps.InitializeModelParallel(pstate.ParallelConfig{TensorParallel: 3}))
		g := mustGroup(t, ps, pstate.World)
		n, r := g.WorldSize(), g.RankInGroup()
		rows := rowsOf[int64](n)
		sum := make([]int64, len(rows[0]))
		var concat []int64
		for _, row := range rows {
			for j, v := range row {
				sum[j] += v
			}
			concat = append(concat, row...)
		}
		for root := 0; root < n; root++ {
			got, err := pstate.Reduce(g, rows[r], pstate.Sum, root)
			must(t, err)
			if r == root {
				check(t, "Reduce", got, sum)
			} else if got != nil {
				t.Fatalf("Reduce off the root returned %v", got)
			}
			x := append([]int64(nil), rows[r]...)
			recv := pstate.Buffer{}
			if r == root {
				recv = pstate.Slice(x)
			}
			must(t, g.Reduce(pstate.Slice(x), recv, pstate.Sum, root))
			if r == root {
				check(t, "Reduce in place", x, sum)
			} else {
				check(t, "Reduce send off the root", x, rows[r])
			}
			var send []int64
			if r == root {
				send = concat
			}
			block, err := pstate.Scatter(g, send, len(rows[r]), root)
			must(t, err)
			check(t, "Scatter", block, rows[r])
		}

		solo := mustGroup(t, ps, pstate.SelfPP)
		a, short := []float32{1, 2, 3}, make([]float32, 2)
		for _, err := range []error{
			solo.Reduce(pstate.Slice(a), pstate.Buffer{}, pstate.Sum, 0),
			solo.Reduce(pstate.Slice(a), pstate.Slice(short), pstate.Sum, 0),
			solo.Reduce(pstate.Slice(a), pstate.Slice([]int32{0, 0, 0}), pstate.Sum, 0),
			solo.Scatter(pstate.Slice(a[:1]), pstate.Slice(short), 0),
			solo.Scatter(pstate.Slice(a), pstate.Slice(a), 1), // C: 1 is not a rank of a group of one
		} {
			if !errors.Is(err, pstate.ErrInvalidArgument) {
				t.Fatalf("err = %v, want ErrInvalidArgument", err)
			}
		}
		out, err := pstate.Scatter(solo, a, 3, 0)
		must(t, err)
		check(t, "Scatter on a group of one", out, a)
	})
}
