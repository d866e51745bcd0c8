package pstate_test

// Arguments as a new user meets them: typed constants out of range are refused by the binding
// with the Go names, zero parallel sizes are the defaults (pstate.h's rule for every front end),
// the library's messages name Go calls, and Interrupt stops a blocked call.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"pstate.dev/pstate"
)

// oneRank is a world of one rank over a file store, no launcher needed.
func oneRank(t *testing.T) *pstate.PState {
	t.Helper()
	ps, err := pstate.Init(pstate.WithWorldSize(1), pstate.WithRank(0),
		pstate.WithInitMethod("file://"+filepath.Join(t.TempDir(), "store")), pstate.WithTimeout(10*time.Second))
	must(t, err)
	return ps
}

func expectDetail(t *testing.T, err error, want error, has ...string) {
	t.Helper()
	expectErr(t, err, want)
	var pe *pstate.Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %#v, want a *pstate.Error", err)
	}
	for _, s := range has {
		if !strings.Contains(pe.Detail, s) {
			t.Fatalf("detail %q lacks %q", pe.Detail, s)
		}
	}
	if strings.Contains(pe.Detail, "pstate_") {
		t.Fatalf("detail %q speaks C", pe.Detail)
	}
}

func TestTypedConstantsOutOfRangeAreRefusedWithGoNames(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	w := mustGroup(t, ps, pstate.World)
	x := []float32{1, 2}
	expectDetail(t, pstate.AllReduce(w, x, pstate.ReduceOp(7)), pstate.ErrInvalidArgument,
		"ReduceOp(7) is not a pstate.ReduceOp (Sum, Prod, Max, Min, Avg)")
	expectDetail(t, w.ReduceScatter(pstate.Slice(x), pstate.Slice(x[:2]), pstate.ReduceOp(-1)), pstate.ErrInvalidArgument,
		"ReduceOp(-1)")
	expectDetail(t, ps.TPAllReduce(pstate.Slice(x), pstate.ReduceOp(5)), pstate.ErrInvalidArgument, "ReduceOp(5)")
	_, err := ps.Group(pstate.GroupKind(99))
	expectDetail(t, err, pstate.ErrInvalidArgument, "GroupKind(99) is not a pstate.GroupKind (World, TP, PP")
	bad := pstate.DeviceBuffer(0, 0, pstate.DType(42))
	expectDetail(t, w.Broadcast(bad, 0), pstate.ErrInvalidArgument, "DType(42) is not a pstate.DType")
	expectDetail(t, w.AllReduce(bad, bad, pstate.Sum), pstate.ErrInvalidArgument, "DType(42)")
	l, err := pstate.NewLayout(2, pstate.ParallelConfig{})
	must(t, err)
	defer l.Close()
	_, err = l.Groups(pstate.GroupKind(-3))
	expectDetail(t, err, pstate.ErrInvalidArgument, "GroupKind(-3)")
	if got := fmt.Sprint(pstate.ReduceOp(7), pstate.DType(42), pstate.Device(5), pstate.GroupKind(99)); got != "ReduceOp(7) DType(42) Device(5) GroupKind(99)" {
		t.Fatalf("String of out-of-range values: %q", got)
	}
	// still usable: nothing reached C
	must(t, pstate.AllReduce(w, x, pstate.Max))
}

func TestInitRefusesADeviceOutOfRange(t *testing.T) {
	_, err := pstate.Init(pstate.WithWorldSize(1), pstate.WithRank(0), pstate.WithDevice(pstate.Device(5)),
		pstate.WithInitMethod("file://"+filepath.Join(t.TempDir(), "store")))
	expectDetail(t, err, pstate.ErrInvalidArgument, "Device(5)", "CPU, CUDA")
}

func TestZeroParallelSizesAreTheDefaults(t *testing.T) {
	explicit, err := pstate.NewLayout(4, pstate.ParallelConfig{TensorParallel: 2, PipelineParallel: 2})
	must(t, err)
	defer explicit.Close()
	given, err := pstate.NewLayout(4, pstate.ParallelConfig{PipelineParallel: 2}) // before: world 4 != tp 1 x pp 2
	must(t, err)
	defer given.Close()
	for k := pstate.World; k <= pstate.SelfPP; k++ {
		a, errA := explicit.Groups(k)
		b, errB := given.Groups(k)
		if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: %v (%v) vs %v (%v)", k, a, errA, b, errB)
		}
	}
	_, err = pstate.NewLayout(6, pstate.ParallelConfig{PipelineParallel: 4})
	expectDetail(t, err, pstate.ErrInvalidArgument, "world_size 6 is not divisible by pipeline_parallel_size 4")
	_, err = pstate.NewLayout(4, pstate.ParallelConfig{ExpertParallel: -1})
	expectDetail(t, err, pstate.ErrInvalidArgument, "expert_parallel_size is -1")
	ps := oneRank(t)
	defer ps.Close()
	must(t, ps.InitializeModelParallel(pstate.ParallelConfig{PipelineParallel: 1, ExpertParallel: 0}))
	if tp := mustGroup(t, ps, pstate.TP); tp.WorldSize() != 1 {
		t.Fatalf("tp of a world of one: %d ranks", tp.WorldSize())
	}
}

func TestMessagesNameGoCalls(t *testing.T) {
	for _, v := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
		"SLURM_PROCID", "SLURM_NTASKS"} {
		if old, ok := os.LookupEnv(v); ok {
			os.Unsetenv(v)
			defer os.Setenv(v, old)
		}
	}
	_, err := pstate.Init(pstate.WithInitMethod("file://" + filepath.Join(t.TempDir(), "store")))
	expectDetail(t, err, pstate.ErrInvalidArgument, "set WithWorldSize and WithRank")
	ps := oneRank(t)
	defer ps.Close()
	_, err = ps.Group(pstate.TP)
	expectDetail(t, err, pstate.ErrInvalidState, "call ps.InitializeModelParallel first")
}

// Rank 0 blocks in Recv from rank 1, which never sends; another goroutine interrupts it 0.5 s in.
// Recv returns ErrInterrupted within a second, the PState is failed (ErrAborted naming the
// interruption and ps.Abort()), Abort frees it. Rank 1 waits for rank 0's verdict, then aborts.
func TestInterruptStopsABlockedCallTwoRanks(t *testing.T) {
	verdict := filepath.Join(os.TempDir(), fmt.Sprintf("pstate-go-interrupt-%s", os.Getenv("MASTER_PORT")))
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		w := mustGroup(t, ps, pstate.World)
		if w.RankInGroup() == 1 {
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(verdict); err == nil {
					break
				}
			}
			must(t, ps.Abort())
			_ = os.Remove(verdict)
			return
		}
		sent := make(chan time.Time, 1)
		timer := time.AfterFunc(500*time.Millisecond, func() { sent <- time.Now(); ps.Interrupt() })
		defer timer.Stop()
		err := pstate.Recv(w, make([]float32, 4), 1)
		took := time.Since(<-sent)
		expectDetail(t, err, pstate.ErrInterrupted, "interrupted", "ps.Abort()")
		fmt.Printf("INTERRUPTED Recv after %d ms\n", took.Milliseconds())
		if took > time.Second {
			t.Fatalf("Recv returned %v after Interrupt", took)
		}
		expectDetail(t, w.Barrier(), pstate.ErrAborted, "interrupted", "ps.Abort()")
		must(t, ps.Abort())
		ps.Interrupt() // after Abort: nothing to stop, and no crash
		must(t, os.WriteFile(verdict, []byte(took.String()), 0o600))
	})
}

// A watchdog goroutine stops the Recv rank 0 is blocked in (rank 1 never sends) with ps.Abort:
// Recv returns ErrAborted naming the abort, and Abort returns once it has, having freed the
// state. Rank 1 waits for rank 0's verdict, then aborts.
func TestAbortFromAWatchdogGoroutineStopsABlockedCallTwoRanks(t *testing.T) {
	verdict := filepath.Join(os.TempDir(), fmt.Sprintf("pstate-go-abort-%s", os.Getenv("MASTER_PORT")))
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		w := mustGroup(t, ps, pstate.World)
		if w.RankInGroup() == 1 {
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(verdict); err == nil {
					break
				}
			}
			must(t, ps.Abort())
			_ = os.Remove(verdict)
			return
		}
		fired := make(chan time.Time, 1)
		aborted := make(chan error, 1)
		go func() {
			time.Sleep(300 * time.Millisecond)
			fired <- time.Now()
			aborted <- ps.Abort() // stops the Recv below, then frees the state
		}()
		err := pstate.Recv(w, make([]float32, 4), 1)
		took := time.Since(<-fired)
		expectDetail(t, err, pstate.ErrAborted, "another thread")
		must(t, <-aborted)
		fmt.Printf("ABORTED Recv %d ms after ps.Abort on another goroutine\n", took.Milliseconds())
		if took > 10*time.Second {
			t.Fatalf("Recv returned %v after Abort", took)
		}
		must(t, ps.Revoke()) // after Abort: nothing to stop, and no crash
		must(t, ps.Abort())  // a no-op
		must(t, os.WriteFile(verdict, []byte(took.String()), 0o600))
	})
}

func TestTraceDumpWritesThisRanksFlightRecorder(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	file := filepath.Join(t.TempDir(), "dump.txt")
	must(t, ps.TraceDump(file))
	data, err := os.ReadFile(file)
	must(t, err)
	text := string(data)
	if !strings.HasPrefix(text, "pstate-trace 1\n") || !strings.HasSuffix(text, "\nend\n") ||
		!strings.Contains(text, "\nreason pstate_trace_dump\n") || !strings.Contains(text, "\ngroup 0 world:0 1 0 0 ") {
		t.Fatalf("dump:\n%s", text)
	}
	expectDetail(t, ps.TraceDump("/proc/no-such-dir/x"), pstate.ErrInvalidArgument, "/proc/no-such-dir/x")
}

// A group's own timeout (issue 43): the context's at first, the group's after SetTimeout, the
// context's again after 0; a negative one is refused in Go names. The C suite
// (tests/api/test_group_timeout.c) shows it ending a stalled call at the group's 200 ms.
func TestGroupTimeoutSetAndRead(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	w, err := ps.Group(pstate.World)
	must(t, err)
	d, err := w.Timeout()
	must(t, err)
	if d != 10*time.Second {
		t.Fatalf("Timeout() = %v at first, want the context's 10s", d)
	}
	must(t, w.SetTimeout(250*time.Millisecond))
	if d, err = w.Timeout(); err != nil || d != 250*time.Millisecond {
		t.Fatalf("Timeout() = %v, %v after SetTimeout(250ms)", d, err)
	}
	must(t, w.Barrier())
	must(t, w.SetTimeout(0))
	if d, err = w.Timeout(); err != nil || d != 10*time.Second {
		t.Fatalf("Timeout() = %v, %v after SetTimeout(0)", d, err)
	}
	expectDetail(t, w.SetTimeout(-time.Second), pstate.ErrInvalidArgument, "is negative")
}
