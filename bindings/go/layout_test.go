package pstate_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"pstate.dev/pstate"
)

// sglangTPPP is SGLang's TP x PP layout computed independently: TP groups are tp consecutive
// ranks, PP groups take ranks tp apart.
func sglangTPPP(world, tp int) (tpGroups, ppGroups [][]int) {
	for i := 0; i < world/tp; i++ {
		var g []int
		for r := i * tp; r < (i+1)*tp; r++ {
			g = append(g, r)
		}
		tpGroups = append(tpGroups, g)
	}
	for i := 0; i < tp; i++ {
		var g []int
		for r := i; r < world; r += tp {
			g = append(g, r)
		}
		ppGroups = append(ppGroups, g)
	}
	return
}

func TestLayoutTPPPGroupsMatchSGLang(t *testing.T) {
	for _, c := range []struct{ world, tp, pp int }{{8, 4, 2}, {8, 2, 4}, {4, 2, 2}, {6, 3, 2}, {1, 1, 1}} {
		l, err := pstate.NewLayout(c.world, pstate.ParallelConfig{TensorParallel: c.tp, PipelineParallel: c.pp})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		wantTP, wantPP := sglangTPPP(c.world, c.tp)
		gotTP, err := l.Groups(pstate.TP)
		if err != nil || !reflect.DeepEqual(gotTP, wantTP) {
			t.Fatalf("%+v: tp %v (%v), want %v", c, gotTP, err, wantTP)
		}
		gotPP, err := l.Groups(pstate.PP)
		if err != nil || !reflect.DeepEqual(gotPP, wantPP) {
			t.Fatalf("%+v: pp %v (%v), want %v", c, gotPP, err, wantPP)
		}
		for r := 0; r < c.world; r++ {
			idx, err := l.GroupOf(pstate.TP, r)
			if err != nil || idx != r/c.tp {
				t.Fatalf("%+v: GroupOf(tp, %d) = %d, %v", c, r, idx, err)
			}
		}
		l.Close()
	}
}

func TestLayoutRejectsWorldNotTPTimesPPWithLibraryText(t *testing.T) {
	_, err := pstate.NewLayout(6, pstate.ParallelConfig{TensorParallel: 4})
	if !errors.Is(err, pstate.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
	var pe *pstate.Error
	if !errors.As(err, &pe) || pe.Detail == "" || pe.Status != pstate.StatusInvalidArgument {
		t.Fatalf("err = %#v, want *pstate.Error with the library's detail", err)
	}
	if errors.Is(err, pstate.ErrTimeout) {
		t.Fatal("an invalid-argument error matched ErrTimeout")
	}
}

func TestLayoutClosedIsInvalidState(t *testing.T) {
	l, err := pstate.NewLayout(2, pstate.ParallelConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := l.Groups(pstate.TP); !errors.Is(err, pstate.ErrInvalidState) {
		t.Fatalf("err = %v, want ErrInvalidState", err)
	}
}

type logit float32

func TestDTypeOfEveryElementType(t *testing.T) {
	cases := []struct {
		got, want pstate.DType
	}{
		{pstate.DTypeOf[int8](), pstate.Int8}, {pstate.DTypeOf[uint8](), pstate.Uint8},
		{pstate.DTypeOf[int32](), pstate.Int32}, {pstate.DTypeOf[uint32](), pstate.Uint32},
		{pstate.DTypeOf[int64](), pstate.Int64}, {pstate.DTypeOf[uint64](), pstate.Uint64},
		{pstate.DTypeOf[int](), pstate.Int64}, {pstate.DTypeOf[uint](), pstate.Uint64},
		{pstate.DTypeOf[float32](), pstate.Float32}, {pstate.DTypeOf[float64](), pstate.Float64},
		{pstate.DTypeOf[pstate.Half](), pstate.Float16}, {pstate.DTypeOf[pstate.BHalf](), pstate.BFloat16},
		{pstate.DTypeOf[logit](), pstate.Float32},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: %v, want %v", i, c.got, c.want)
		}
	}
	if pstate.Float32.String() != "float32" || pstate.BFloat16.Size() != 2 || pstate.TP.String() != "tp" {
		t.Fatalf("names/sizes: %s %d %s", pstate.Float32, pstate.BFloat16.Size(), pstate.TP)
	}
}

func TestStatusNamesComeFromTheLibrary(t *testing.T) {
	if got := pstate.StatusTimeout.CName(); got != "PSTATE_ERR_TIMEOUT" {
		t.Fatalf("StatusTimeout = %q", got)
	}
	if pstate.Version() != 10000 {
		t.Fatalf("Version() = %d, want 10000 (1.0.0)", pstate.Version())
	}
}

// vllmGroups is vLLM's initialize_model_parallel computed independently: rank r is (e, d, p, c, t)
// in arange(world).reshape(-1, dp, pp, pcp, tp), a kind's groups are the rows of the grid with the
// kind's axes moved last (transpose, reshape(-1, size)), listed in the order of the axes left in
// front: pcp (e, d, p, t), pp (e, d, t, c), dp (e, t, p, c), ep (e, p) over (d, c, t).
func vllmGroups(world, tp, pp, dp, pcp int, kind pstate.GroupKind) [][]int {
	ext := world / tp / pp / dp / pcp
	rank := func(e, d, p, c, t int) int { return (((e*dp+d)*pp+p)*pcp+c)*tp + t }
	var out [][]int
	switch kind {
	case pstate.TP:
		for e := 0; e < ext; e++ {
			for d := 0; d < dp; d++ {
				for p := 0; p < pp; p++ {
					for c := 0; c < pcp; c++ {
						var g []int
						for t := 0; t < tp; t++ {
							g = append(g, rank(e, d, p, c, t))
						}
						out = append(out, g)
					}
				}
			}
		}
	case pstate.PCP:
		for e := 0; e < ext; e++ {
			for d := 0; d < dp; d++ {
				for p := 0; p < pp; p++ {
					for t := 0; t < tp; t++ {
						var g []int
						for c := 0; c < pcp; c++ {
							g = append(g, rank(e, d, p, c, t))
						}
						out = append(out, g)
					}
				}
			}
		}
	case pstate.PP:
		for e := 0; e < ext; e++ {
			for d := 0; d < dp; d++ {
				for t := 0; t < tp; t++ {
					for c := 0; c < pcp; c++ {
						var g []int
						for p := 0; p < pp; p++ {
							g = append(g, rank(e, d, p, c, t))
						}
						out = append(out, g)
					}
				}
			}
		}
	case pstate.DP:
		for e := 0; e < ext; e++ {
			for t := 0; t < tp; t++ {
				for p := 0; p < pp; p++ {
					for c := 0; c < pcp; c++ {
						var g []int
						for d := 0; d < dp; d++ {
							g = append(g, rank(e, d, p, c, t))
						}
						out = append(out, g)
					}
				}
			}
		}
	case pstate.EP, pstate.EPLB:
		for e := 0; e < ext; e++ {
			for p := 0; p < pp; p++ {
				var g []int
				for d := 0; d < dp; d++ {
					for c := 0; c < pcp; c++ {
						for t := 0; t < tp; t++ {
							g = append(g, rank(e, d, p, c, t))
						}
					}
				}
				out = append(out, g)
			}
		}
	}
	return out
}

func TestLayoutVLLMEngineMatchesVLLMsGrid(t *testing.T) {
	for _, c := range []struct{ world, tp, pp, dp, pcp int }{
		{8, 2, 2, 2, 1}, {8, 2, 2, 1, 2}, {16, 2, 2, 2, 2}, {12, 2, 1, 2, 1}, {8, 2, 4, 1, 1}, {1, 1, 1, 1, 1},
	} {
		l, err := pstate.NewLayout(c.world, pstate.ParallelConfig{Engine: pstate.VLLM, TensorParallel: c.tp,
			PipelineParallel: c.pp, DataParallel: c.dp, PrefillContextParallel: c.pcp, MoEModel: true})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		for _, kind := range []pstate.GroupKind{pstate.TP, pstate.PCP, pstate.PP, pstate.DP, pstate.EP, pstate.EPLB} {
			got, err := l.Groups(kind)
			if want := vllmGroups(c.world, c.tp, c.pp, c.dp, c.pcp, kind); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%+v: %v %v (%v), want %v", c, kind, got, err, want)
			}
		}
		if n, err := l.GroupCount(pstate.AttnTP); err != nil || n != 0 {
			t.Fatalf("%+v: AttnTP count %d (%v): SGLang's kinds are not in vLLM's layout", c, n, err)
		}
		l.Close()
	}
	if pstate.VLLM.String() != "vllm" || pstate.Engine(7).Valid() {
		t.Fatal("Engine String/Valid")
	}
}

func TestLayoutVLLMRefusalsNameTheSizes(t *testing.T) {
	_, err := pstate.NewLayout(12, pstate.ParallelConfig{Engine: pstate.VLLM, TensorParallel: 2, PipelineParallel: 2,
		DataParallel: 2})
	var pe *pstate.Error
	if !errors.Is(err, pstate.ErrInvalidArgument) || !errors.As(err, &pe) ||
		!strings.Contains(pe.Detail, "world_size 12 is not divisible by data_parallel_size 2") {
		t.Fatalf("err = %v, want the library's reason", err)
	}
	if _, err := pstate.NewLayout(4, pstate.ParallelConfig{Engine: pstate.Engine(5)}); !errors.Is(err, pstate.ErrInvalidArgument) {
		t.Fatalf("Engine(5): err = %v", err)
	}
	if _, err := pstate.NewLayout(4, pstate.ParallelConfig{DataParallel: 2}); err == nil ||
		!strings.Contains(err.Error(), "a size of vLLM's layout") {
		t.Fatalf("SGLang with DataParallel 2: err = %v", err)
	}
}
