// memory_test.go — group memory (issue 29): the CPU context's refusal, and the allocator on the
// devsim stand-ins (a world of one: plain memory, the fallback; the pool) where they were built
// in the build tree ($PSTATE_BUILD_DIR/tests/devsim); without them that part is skipped.
package pstate_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"pstate.dev/pstate"
)

func TestGroupMemoryNeedsACUDAContext(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	w := mustGroup(t, ps, pstate.World)
	_, err := w.MemAlloc(4096)
	expectDetail(t, err, pstate.ErrUnsupported, "CUDA context")
	_, err = w.MemStats()
	expectErr(t, err, pstate.ErrUnsupported)
	_, err = w.MemAlloc(0)
	expectDetail(t, err, pstate.ErrInvalidArgument, "bytes is 0")
	must(t, ps.SetGraphRegistration(true))
}

func TestGroupMemoryOnDevsimWorldOfOne(t *testing.T) {
	cudart := filepath.Join(os.Getenv("PSTATE_BUILD_DIR"), "tests", "devsim", "libpstate_devsim_cudart.so")
	if _, err := os.Stat(cudart); os.Getenv("PSTATE_BUILD_DIR") == "" || err != nil {
		t.Skip("the devsim stand-ins are not built (PSTATE_BUILD_DIR/tests/devsim)")
	}
	t.Setenv("PSTATE_CUDA_RUNTIME_LIBRARY", cudart)
	ps, err := pstate.Init(pstate.WithWorldSize(1), pstate.WithRank(0), pstate.WithDevice(pstate.CUDA),
		pstate.WithInitMethod("file://"+filepath.Join(t.TempDir(), "store")), pstate.WithTimeout(10*time.Second))
	must(t, err)
	defer ps.Close()
	w := mustGroup(t, ps, pstate.World)
	m, err := w.MemAlloc(4096)
	must(t, err)
	info, err := w.MemQuery(m.Ptr + 8)
	must(t, err)
	if info.Kind != pstate.MemGroup || info.Base != m.Ptr || info.Size != 4096 || info.Symmetric || m.Pooled {
		t.Fatalf("query of group memory in a world of one (plain): %+v, pooled %v", info, m.Pooled)
	}
	st, err := w.MemStats()
	must(t, err)
	if st.SymmetricAvailable || st.Allocated != 4096 || st.Windows != 0 {
		t.Fatalf("stats: %+v", st)
	}
	must(t, m.Close())
	must(t, m.Close()) // a second Close does nothing
	must(t, w.MemPoolReserve(8192))
	p, err := w.MemAlloc(100)
	must(t, err)
	if !p.Pooled {
		t.Fatalf("an allocation after the reserve is a pool piece: %+v", p)
	}
	_, err = w.MemAlloc(1 << 20)
	expectDetail(t, err, pstate.ErrNoMemory, "reserve")
	must(t, p.Close())
}
