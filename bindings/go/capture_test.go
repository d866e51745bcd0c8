package pstate_test

// Close while a graph capture is open (CUDA contexts): pstate_finalize refuses and frees nothing
// (pstate.h), so Close must keep the handle: the PState stays usable, Capture.End then Close
// works, and so does Abort. Before: Close dropped the handle first, so the context leaked, Abort
// and Revoke could not reach it and every later call said "closed".
//
// It needs a CUDA context: the devsim stand-ins of tests/devsim (ctest bindings_go_devsim sets
// PSTATE_CUDA_RUNTIME_LIBRARY and PSTATE_NCCL_LIBRARY to them); without them it is skipped.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"pstate.dev/pstate"
)

func cudaRank(t *testing.T) *pstate.PState {
	t.Helper()
	if os.Getenv("PSTATE_CUDA_RUNTIME_LIBRARY") == "" || os.Getenv("PSTATE_NCCL_LIBRARY") == "" {
		t.Skip("needs a CUDA context: set PSTATE_CUDA_RUNTIME_LIBRARY and PSTATE_NCCL_LIBRARY (ctest bindings_go_devsim: the devsim stand-ins)")
	}
	ps, err := pstate.Init(pstate.WithWorldSize(1), pstate.WithRank(0), pstate.WithDevice(pstate.CUDA), pstate.WithDeviceOrdinal(0),
		pstate.WithInitMethod("file://"+filepath.Join(t.TempDir(), "store")), pstate.WithTimeout(20*time.Second))
	must(t, err)
	return ps
}

func TestCloseInCaptureModeKeepsTheContextDevsim(t *testing.T) {
	ps := cudaRank(t)
	c, err := ps.GraphCapture(0)
	must(t, err)
	expectDetail(t, ps.Close(), pstate.ErrInvalidState, "graph-capture mode", "nothing was released", "Capture.End")
	if ps.Rank() != 0 || ps.WorldSize() != 1 { // still reachable
		t.Fatalf("after the refused Close: rank %d of %d", ps.Rank(), ps.WorldSize())
	}
	must(t, c.End())
	must(t, ps.Close())
	must(t, ps.Close()) // a no-op
	if ps.Rank() != -1 {
		t.Fatalf("after Close: rank %d", ps.Rank())
	}
}

func TestAbortReachesAContextCloseRefusedDevsim(t *testing.T) {
	ps := cudaRank(t)
	_, err := ps.GraphCapture(0)
	must(t, err)
	expectErr(t, ps.Close(), pstate.ErrInvalidState)
	must(t, ps.Revoke()) // reaches the live context: later calls are ABORTED, not "closed"
	_, err = ps.World()
	expectDetail(t, err, pstate.ErrAborted, "another thread")
	must(t, ps.Abort()) // frees it (pstate_abort always frees)
	must(t, ps.Close()) // a no-op now
	if ps.Rank() != -1 {
		t.Fatalf("after Abort: rank %d", ps.Rank())
	}
}
