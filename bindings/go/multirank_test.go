package pstate_test

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pstate.dev/pstate"
)

func mustInit(t *testing.T, opts ...pstate.Option) *pstate.PState {
	t.Helper()
	ps, err := pstate.Init(append([]pstate.Option{pstate.WithTimeout(60 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	return ps
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustGroup(t *testing.T, ps *pstate.PState, kind pstate.GroupKind) *pstate.Group {
	t.Helper()
	g, err := ps.Group(kind)
	must(t, err)
	return g
}

func expectErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func TestLifecycleAndOutOfOrderCallsTwoRanks(t *testing.T) {
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		if ps.WorldSize() != 2 || strconv.Itoa(ps.Rank()) != os.Getenv("RANK") {
			t.Fatalf("world %d rank %d", ps.WorldSize(), ps.Rank())
		}
		if ps.ModelParallelIsInitialized() {
			t.Fatal("model parallel initialized before InitializeModelParallel")
		}
		if live, err := ps.LiveRanks(); err != nil || len(live) != 2 || live[0] != 0 || live[1] != 1 {
			t.Fatalf("LiveRanks() = %v, %v; want [0 1] (nobody died)", live, err)
		}
		// Shrink with nobody dead: the same world, renumbered as before (no model-parallel groups yet)
		rank, oldWorld := ps.Rank(), mustGroup(t, ps, pstate.World)
		if newRank, err := ps.Shrink(); err != nil || !reflect.DeepEqual(newRank, []int{0, 1}) {
			t.Fatalf("Shrink() = %v, %v; want [0 1] (nobody died)", newRank, err)
		}
		if ps.WorldSize() != 2 || ps.Rank() != rank {
			t.Fatalf("after Shrink: world %d rank %d, want 2, %d", ps.WorldSize(), ps.Rank(), rank)
		}
		expectErr(t, oldWorld.Barrier(), pstate.ErrInvalidState) // Shrink replaced the world group
		worldSumOfOnes := func(when string) {
			ones := []int32{1, 1, 1}
			must(t, pstate.AllReduce(mustGroup(t, ps, pstate.World), ones, pstate.Sum))
			if !reflect.DeepEqual(ones, []int32{2, 2, 2}) {
				t.Fatalf("%s: all-reduce of ones over the world = %v, want [2 2 2]", when, ones)
			}
		}
		worldSumOfOnes("after Shrink")
		// Grow with nobody waiting to join: ErrTimeout, the world unchanged and usable
		expectErr(t, ps.Grow(300), pstate.ErrTimeout)
		worldSumOfOnes("after a Grow that timed out")
		if live, err := ps.LiveRanks(); err != nil || !reflect.DeepEqual(live, []int{0, 1}) {
			t.Fatalf("LiveRanks() after Shrink/Grow = %v, %v; want [0 1]", live, err)
		}
		_, err := ps.Group(pstate.TP)
		expectErr(t, err, pstate.ErrInvalidState)
		must(t, ps.InitializeModelParallel(pstate.ParallelConfig{TensorParallel: 2}))
		expectErr(t, ps.InitializeModelParallel(pstate.ParallelConfig{}), pstate.ErrInvalidState)
		tp := mustGroup(t, ps, pstate.TP)
		must(t, tp.Barrier())
		must(t, ps.DestroyModelParallel())
		expectErr(t, tp.Barrier(), pstate.ErrInvalidState) // refused, never touches freed memory
		expectErr(t, ps.DestroyModelParallel(), pstate.ErrInvalidState)
		world := mustGroup(t, ps, pstate.World)
		must(t, world.Barrier())
		must(t, ps.Close())
		expectErr(t, world.Barrier(), pstate.ErrInvalidState)
		must(t, ps.Close()) // idempotent
	})
}

func TestGroupInfoOfTP2PP2MatchesSGLangFourRanks(t *testing.T) {
	onRanks(t, 4, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		must(t, ps.InitializeModelParallel(pstate.ParallelConfig{TensorParallel: 2, PipelineParallel: 2}))
		rank := ps.Rank()
		tpGroups, ppGroups := sglangTPPP(4, 2)
		for _, c := range []struct {
			kind  pstate.GroupKind
			ranks []int
		}{{pstate.TP, tpGroups[rank/2]}, {pstate.PP, ppGroups[rank%2]}} {
			g := mustGroup(t, ps, c.kind)
			got, err := g.Ranks()
			must(t, err)
			if !reflect.DeepEqual(got, c.ranks) {
				t.Fatalf("%v ranks %v, want %v", c.kind, got, c.ranks)
			}
			i := indexOf(c.ranks, rank)
			n := len(c.ranks)
			want := pstate.GroupInfo{Kind: c.kind, Name: g.Name(), Rank: rank, RankInGroup: i, WorldSize: n,
				LocalRank: g.Info().LocalRank, FirstRank: c.ranks[0], LastRank: c.ranks[n-1],
				NextRank: c.ranks[(i+1)%n], PrevRank: c.ranks[(i-1+n)%n]}
			if g.Info() != want {
				t.Fatalf("%v info %+v, want %+v", c.kind, g.Info(), want)
			}
			if !strings.HasPrefix(g.Name(), c.kind.String()+":") {
				t.Fatalf("name %q", g.Name())
			}
			same, err := g.SameNode(0)
			must(t, err)
			if !reflect.DeepEqual(same, []bool{true, true}) {
				t.Fatalf("SameNode %v", same)
			}
		}
	})
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// rowsOf is every rank's input: rank k holds (j * (k+1) + k) for j in [0, 4n).
func rowsOf[T pstate.Element](n int) [][]T {
	rows := make([][]T, n)
	for k := range rows {
		rows[k] = make([]T, 4*n)
		for j := range rows[k] {
			rows[k][j] = T(j*(k+1) + k)
		}
	}
	return rows
}

func opsOn[T pstate.Element](t *testing.T, g *pstate.Group) {
	n, r := g.WorldSize(), g.RankInGroup()
	rows := rowsOf[T](n)
	mine := append([]T(nil), rows[r]...)
	sum := make([]T, len(mine))
	max := make([]T, len(mine))
	for _, row := range rows {
		for j, v := range row {
			sum[j] += v
			if v > max[j] {
				max[j] = v
			}
		}
	}
	x := append([]T(nil), mine...)
	must(t, pstate.AllReduce(g, x, pstate.Sum))
	check(t, "AllReduce sum", x, sum)
	out := make([]T, len(mine))
	must(t, g.AllReduce(pstate.Slice(mine), pstate.Slice(out), pstate.Max))
	check(t, "AllReduce max", out, max)
	var concat []T
	for _, row := range rows {
		concat = append(concat, row...)
	}
	got, err := pstate.AllGather(g, mine)
	must(t, err)
	check(t, "AllGather", got, concat)
	got, err = pstate.ReduceScatter(g, mine, pstate.Sum)
	must(t, err)
	check(t, "ReduceScatter", got, sum[r*4:(r+1)*4])
	b := append([]T(nil), mine...)
	must(t, pstate.Broadcast(g, b, n-1))
	check(t, "Broadcast", b, rows[n-1])
	got, err = pstate.Gather(g, mine, 0)
	must(t, err)
	if r == 0 {
		check(t, "Gather", got, concat)
	} else if got != nil {
		t.Fatalf("Gather on a non-root rank returned %v", got)
	}
	var a2a []T
	for k := 0; k < n; k++ {
		a2a = append(a2a, rows[k][r*4:(r+1)*4]...)
	}
	got, err = pstate.AllToAll(g, mine)
	must(t, err)
	check(t, "AllToAll", got, a2a)
	if n > 1 {
		buf := make([]T, len(mine))
		next, prev := (r+1)%n, (r-1+n)%n
		if r%2 == 0 {
			must(t, pstate.Send(g, mine, next))
			must(t, pstate.Recv(g, buf, prev))
		} else {
			must(t, pstate.Recv(g, buf, prev))
			must(t, pstate.Send(g, mine, next))
		}
		check(t, "Send/Recv", buf, rows[prev])
	}
	must(t, g.Barrier())
}

func check[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func TestEveryOpOnFloat32AndInt64WorldTPPPFourRanks(t *testing.T) {
	onRanks(t, 4, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		must(t, ps.InitializeModelParallel(pstate.ParallelConfig{TensorParallel: 2, PipelineParallel: 2}))
		for _, kind := range []pstate.GroupKind{pstate.World, pstate.TP, pstate.PP} {
			g := mustGroup(t, ps, kind)
			opsOn[float32](t, g)
			opsOn[int64](t, g)
		}
		tp := mustGroup(t, ps, pstate.TP)
		tpRanks, err := tp.Ranks()
		must(t, err)
		v := []float32{float32(ps.Rank() + 1), float32(ps.Rank() + 1)}
		must(t, ps.TPAllReduce(pstate.Slice(v), pstate.Sum))
		want := float32(tpRanks[0] + tpRanks[1] + 2)
		check(t, "TPAllReduce", v, []float32{want, want})
		got := make([]int64, 2)
		must(t, ps.TPAllGather(pstate.Slice([]int64{int64(ps.Rank())}), pstate.Slice(got)))
		check(t, "TPAllGather", got, []int64{int64(tpRanks[0]), int64(tpRanks[1])})
	})
}

type stepConfig struct {
	Model  string
	Tokens []int
	Scale  float64
}

func TestObjectBroadcastAndGatherTwoRanks(t *testing.T) {
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		r := w.RankInGroup()
		var mine stepConfig
		if r == 1 {
			mine = stepConfig{Model: "llama", Tokens: []int{1, 2, 3}, Scale: 0.5}
		}
		got, err := pstate.BroadcastValue(w, mine, 1)
		must(t, err)
		if !reflect.DeepEqual(got, stepConfig{Model: "llama", Tokens: []int{1, 2, 3}, Scale: 0.5}) {
			t.Fatalf("BroadcastValue = %+v", got)
		}
		var payload []byte
		if r == 0 {
			payload = make([]byte, 1<<20)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
		}
		big, err := w.BroadcastObject(payload, 0)
		must(t, err)
		if len(big) != 1<<20 || big[12345] != byte(12345*7%256) {
			t.Fatalf("BroadcastObject: %d bytes", len(big))
		}
		all, err := w.AllGatherObject([]byte(strings.Repeat("x", r)))
		must(t, err)
		if len(all) != 2 || string(all[0]) != "" || string(all[1]) != "x" {
			t.Fatalf("AllGatherObject = %q", all)
		}
		names, err := pstate.AllGatherValue(w, fmt.Sprintf("rank-%d", r))
		must(t, err)
		check(t, "AllGatherValue", names, []string{"rank-0", "rank-1"})
		if r == 0 {
			must(t, w.SendObject([]byte("hello"), 1))
		} else {
			msg, err := w.RecvObject(0)
			must(t, err)
			if string(msg) != "hello" {
				t.Fatalf("RecvObject = %q", msg)
			}
		}
	})
}

func TestErrorsMapToStatusesTwoRanks(t *testing.T) {
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		// wrong dtype: fp8 cannot be reduced on CPU (the library refuses)
		fp8 := pstate.DeviceBuffer(0, 0, pstate.FP8E4M3) // count 0: only the dtype matters
		expectErr(t, w.AllReduce(fp8, fp8, pstate.Sum), pstate.ErrUnsupported)
		// wrong dtype between send and recv (the binding refuses before C)
		expectErr(t, w.AllReduce(pstate.Slice([]float32{1}), pstate.Slice([]int32{0}), pstate.Sum), pstate.ErrInvalidArgument)
		// recv too small
		expectErr(t, w.AllGather(pstate.Slice([]float32{1, 2}), pstate.Slice([]float32{0, 0})), pstate.ErrInvalidArgument)
		// bad rank: the library's text names it
		err := pstate.Broadcast(w, []float32{1}, 7)
		expectErr(t, err, pstate.ErrInvalidArgument)
		if !strings.Contains(err.Error(), "7") {
			t.Fatalf("bad-rank error does not name the rank: %v", err)
		}
		// out of order
		_, err = ps.Group(pstate.PP)
		expectErr(t, err, pstate.ErrInvalidState)
		_, err = ps.GraphCapture(0)
		expectErr(t, err, pstate.ErrUnsupported)
		// still usable
		x := []float64{1, 1}
		must(t, pstate.AllReduce(w, x, pstate.Sum))
		check(t, "AllReduce after errors", x, []float64{2, 2})
	})
}

func TestPeerKilledMidOpReturnsPeerLostOrTimeout(t *testing.T) {
	if inRank(t) {
		signal.Ignore(syscall.SIGTERM) // the launcher stops survivors; this one must report first
		ps, err := pstate.Init(pstate.WithTimeout(3 * time.Second))
		must(t, err)
		w := mustGroup(t, ps, pstate.World)
		must(t, w.Barrier())
		if w.RankInGroup() == 1 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		err = pstate.AllReduce(w, make([]float32, 1<<16), pstate.Sum)
		switch {
		case errors.Is(err, pstate.ErrPeerLost), errors.Is(err, pstate.ErrTimeout):
			fmt.Printf("SURVIVOR: %v\n", err)
			_ = ps.Abort()
		default:
			t.Fatalf("AllReduce with a dead peer: %v", err)
		}
		return
	}
	out, err := launch(t, 2, 30000)
	if err == nil {
		t.Fatalf("the job with a killed rank exited 0:\n%s", out)
	}
	if !regexp.MustCompile(`\[0\] SURVIVOR: pstate: AllReduce on world:0: (peer lost|timeout): `).MatchString(out) {
		t.Fatalf("rank 0 did not report PEER_LOST/TIMEOUT:\n%s", out)
	}
	if strings.Contains(out, "peer lost") && !strings.Contains(out, "call ps.Shrink() (survivors go on without the dead) or ps.Abort()") {
		t.Fatalf("PEER_LOST does not name the Go ways out (ps.Shrink(), ps.Abort()):\n%s", out)
	}
}
