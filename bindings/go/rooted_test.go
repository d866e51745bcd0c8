package pstate_test

import (
	"errors"
	"fmt"
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

// ---- issue 46: a refusal that only the root can see fails the call on every rank -------------

// rowOf is rank r's input of call k: 10k + r, twice.
func rowOf(k, r int) []int32 { return []int32{int32(10*k + r), int32(10*k + r)} }

// refusedEverywhere checks the refused call's error on this rank: ErrInvalidArgument, with the
// binding's own text on the refusing rank, and the library's, naming the refusing rank, elsewhere.
func refusedEverywhere(t *testing.T, err error, refuser, me int, text string) {
	t.Helper()
	if me == refuser {
		expectDetail(t, err, pstate.ErrInvalidArgument, text)
	} else {
		expectDetail(t, err, pstate.ErrInvalidArgument, "refused its part of this call",
			fmt.Sprintf("(group rank %d)", refuser))
	}
}

// rootRefusals runs, for every root, each bad root buffer's refused call (refused) and then a
// good call (good, which checks its own data): the good call after a refusal must never be paired
// with the refused one (before: the others went into the refused call and returned the root's
// next call's data, a gather one call behind).
func rootRefusals(t *testing.T, bads func(n int) []pstate.Buffer, refused func(g *pstate.Group, bad pstate.Buffer, k, root int) error,
	good func(t *testing.T, g *pstate.Group, k, root int), text string) {
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		g := mustGroup(t, ps, pstate.World)
		n, me, k := g.WorldSize(), g.RankInGroup(), 0
		for root := 0; root < n; root++ {
			for _, bad := range bads(n) {
				k++
				if me != root {
					bad = pstate.Buffer{}
				}
				refusedEverywhere(t, refused(g, bad, k, root), root, me, text)
				k++
				good(t, g, k, root)
			}
		}
		must(t, g.Barrier())
	})
}

func TestGatherRecvRefusedOnTheRootFailsEveryRankAndKeepsStepTwoRanks(t *testing.T) {
	rootRefusals(t,
		func(n int) []pstate.Buffer {
			return []pstate.Buffer{{}, pstate.Slice(make([]int32, 2*n-1)), pstate.Slice(make([]float32, 2*n))}
		},
		func(g *pstate.Group, bad pstate.Buffer, k, root int) error {
			return g.Gather(pstate.Slice(rowOf(k, g.RankInGroup())), bad, root)
		},
		func(t *testing.T, g *pstate.Group, k, root int) {
			n, me := g.WorldSize(), g.RankInGroup()
			got, recv := make([]int32, 2*n), pstate.Buffer{}
			if me == root {
				recv = pstate.Slice(got)
			}
			must(t, g.Gather(pstate.Slice(rowOf(k, me)), recv, root))
			if me == root {
				check(t, "Gather after a refused one", got, append(rowOf(k, 0), rowOf(k, 1)...))
			}
		}, "recv")
}

func TestReduceRecvRefusedOnTheRootFailsEveryRankAndKeepsStepTwoRanks(t *testing.T) {
	rootRefusals(t,
		func(int) []pstate.Buffer {
			return []pstate.Buffer{{}, pstate.Slice(make([]int32, 1)), pstate.Slice(make([]float64, 2))}
		},
		func(g *pstate.Group, bad pstate.Buffer, k, root int) error {
			return g.Reduce(pstate.Slice(rowOf(k, g.RankInGroup())), bad, pstate.Sum, root)
		},
		func(t *testing.T, g *pstate.Group, k, root int) {
			got, err := pstate.Reduce(g, rowOf(k, g.RankInGroup()), pstate.Sum, root)
			must(t, err)
			if g.RankInGroup() == root {
				check(t, "Reduce after a refused one", got, []int32{int32(20*k + 1), int32(20*k + 1)})
			}
		}, "recv")
}

func TestScatterSendRefusedOnTheRootFailsEveryRankAndKeepsStepTwoRanks(t *testing.T) {
	rootRefusals(t,
		func(n int) []pstate.Buffer {
			return []pstate.Buffer{{}, pstate.Slice(make([]int32, 2*n-1)), pstate.Slice(make([]int64, 2*n))}
		},
		func(g *pstate.Group, bad pstate.Buffer, k, root int) error {
			return g.Scatter(bad, pstate.Slice(make([]int32, 2)), root)
		},
		func(t *testing.T, g *pstate.Group, k, root int) {
			var send []int32
			if g.RankInGroup() == root {
				send = append(rowOf(k, 0), rowOf(k, 1)...)
			}
			got, err := pstate.Scatter(g, send, 2, root)
			must(t, err)
			check(t, "Scatter after a refused one", got, rowOf(k, g.RankInGroup()))
		}, "send")
}

// A symmetric call: one rank's own recv (too short) fails the call on every rank too.
func TestAllReduceRecvRefusedOnOneRankFailsEveryRankAndKeepsStepTwoRanks(t *testing.T) {
	rootRefusals(t,
		func(int) []pstate.Buffer { return []pstate.Buffer{pstate.Slice(make([]int32, 1))} },
		func(g *pstate.Group, bad pstate.Buffer, k, root int) error {
			recv := bad
			if g.RankInGroup() != root {
				recv = pstate.Slice(make([]int32, 2))
			}
			return g.AllReduce(pstate.Slice(rowOf(k, g.RankInGroup())), recv, pstate.Sum)
		},
		func(t *testing.T, g *pstate.Group, k, root int) {
			x := rowOf(k, g.RankInGroup())
			must(t, pstate.AllReduce(g, x, pstate.Sum))
			check(t, "AllReduce after a refused one", x, []int32{int32(20*k + 1), int32(20*k + 1)})
		}, "recv")
}
