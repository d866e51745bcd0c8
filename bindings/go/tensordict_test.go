package pstate_test

// Tensor dicts: every rank builds the dicts its peers send from the same recipe (dictOf), so
// what it receives is checked against its own construction, byte for byte and through typed
// slices; 0-d, 0-size, bfloat16/fp8 and a tensor above the library's inline limit included.

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"pstate.dev/pstate"
)

func tensorOf[T pstate.Element](t *testing.T, name string, shape []int64, data []T) pstate.Tensor {
	t.Helper()
	x, err := pstate.NewTensor(name, shape, data)
	must(t, err)
	return x
}

// dictOf is the dict rank `from` sends: every dtype, scalar, empty and large tensors.
func dictOf(t *testing.T, from int) []pstate.Tensor {
	f := float32(from)
	big := make([]float64, 20000) // 160 kB: moves outside the metadata message
	for i := range big {
		big[i] = float64(from*1000000 + i)
	}
	return []pstate.Tensor{
		tensorOf(t, "f32", []int64{2, 3}, []float32{f, f + 1, f + 2, f + 3, f + 4, f + 5}),
		tensorOf(t, "i64 scalar", nil, []int64{-7 - int64(from)}),
		tensorOf(t, "empty", []int64{0, 4}, []uint8{}),
		tensorOf(t, "i8", []int64{4}, []int8{-1, int8(from), 3, -128}),
		tensorOf(t, "u32", []int64{2, 1}, []uint32{uint32(from), math.MaxUint32}),
		tensorOf(t, "u64", []int64{1}, []uint64{uint64(from) << 40}),
		tensorOf(t, "i32", []int64{1, 1, 2}, []int32{int32(from), -int32(from)}),
		tensorOf(t, "f16", []int64{2}, []pstate.Half{0x3c00, pstate.Half(0x4000 + from)}),
		tensorOf(t, "bf16", []int64{3}, []pstate.BHalf{0x3f80, 0x4000, pstate.BHalf(0x4040 + from)}),
		{Name: "e4m3", DType: pstate.FP8E4M3, Shape: []int64{2, 2}, Data: []byte{0x38, 0x40, byte(from), 0xff}},
		{Name: "e5m2", DType: pstate.FP8E5M2, Shape: []int64{3}, Data: []byte{0x3c, byte(from), 0x80}},
		tensorOf(t, "big", []int64{100, 200}, big),
	}
}

func sameDict(t *testing.T, what string, got, want []pstate.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.DType != w.DType || len(g.Shape) != len(w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("%s: tensor %d = {%q %v %v %d bytes}, want {%q %v %v %d bytes}", what, i, g.Name, g.DType, g.Shape,
				len(g.Data), w.Name, w.DType, w.Shape, len(w.Data))
		}
		for k := range w.Shape {
			if g.Shape[k] != w.Shape[k] {
				t.Fatalf("%s: tensor '%s' shape %v, want %v", what, w.Name, g.Shape, w.Shape)
			}
		}
	}
}

func TestTensorValuesRoundTripsAndChecksTheDType(t *testing.T) {
	x := tensorOf(t, "x", []int64{2, 2}, []float32{1, 2, 3, 4})
	if x.DType != pstate.Float32 || len(x.Data) != 16 || x.NumElements() != 4 {
		t.Fatalf("NewTensor: %+v", x)
	}
	v, err := pstate.TensorValues[float32](x)
	must(t, err)
	check(t, "values", v, []float32{1, 2, 3, 4})
	_, err = pstate.TensorValues[int32](x)
	expectErr(t, err, pstate.ErrInvalidArgument)
	_, err = pstate.NewTensor("y", []int64{3}, []float32{1, 2})
	expectErr(t, err, pstate.ErrInvalidArgument)
	fp8, err := pstate.TensorValues[uint8](pstate.Tensor{Name: "q", DType: pstate.FP8E5M2, Shape: []int64{2}, Data: []byte{1, 2}})
	must(t, err)
	check(t, "fp8", fp8, []uint8{1, 2})
}

func TestBroadcastTensorDictFromEveryRootThreeRanks(t *testing.T) {
	onRanks(t, 3, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		me := w.RankInGroup()
		for root := 0; root < w.WorldSize(); root++ {
			var mine []pstate.Tensor
			if me == root {
				mine = dictOf(t, root)
			}
			got, err := w.BroadcastTensorDict(mine, root)
			must(t, err)
			if me == root && &got[0] != &mine[0] {
				t.Fatal("BroadcastTensorDict on src did not return the dict it sent")
			}
			sameDict(t, "broadcast", got, dictOf(t, root))
			f32, err := pstate.TensorValues[float32](got[0])
			must(t, err)
			r := float32(root)
			check(t, "f32 values", f32, []float32{r, r + 1, r + 2, r + 3, r + 4, r + 5})
			big, err := pstate.TensorValues[float64](got[len(got)-1])
			must(t, err)
			if big[19999] != float64(root*1000000+19999) {
				t.Fatalf("big[19999] = %v", big[19999])
			}
		}
		var none []pstate.Tensor
		if me == 0 {
			none = []pstate.Tensor{}
		}
		empty, err := w.BroadcastTensorDict(none, 0)
		must(t, err)
		if len(empty) != 0 {
			t.Fatalf("empty dict arrived with %d tensors", len(empty))
		}
	})
}

func TestSendAndRecvTensorDictAroundARingThreeRanks(t *testing.T) {
	onRanks(t, 3, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		n, r := w.WorldSize(), w.RankInGroup()
		next, prev := (r+1)%n, (r+n-1)%n
		var got []pstate.Tensor
		var err error
		if r%2 == 0 { // even ranks send first, odd ranks receive first: no cycle of waiting senders
			must(t, w.SendTensorDict(dictOf(t, r), next))
			got, err = w.RecvTensorDict(prev)
		} else {
			got, err = w.RecvTensorDict(prev)
			must(t, err)
			must(t, w.SendTensorDict(dictOf(t, r), next))
		}
		must(t, err)
		sameDict(t, "recv", got, dictOf(t, prev))
	})
}

func TestTensorDictRefusalsFailEveryRankTwoRanks(t *testing.T) {
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		src := w.RankInGroup() == 0
		bad := map[string][]pstate.Tensor{
			// the binding refuses: C would read past Data
			"short data": {{Name: "x", DType: pstate.Float32, Shape: []int64{4}, Data: make([]byte, 8)}},
			"NUL name":   {{Name: "a\x00b", DType: pstate.Uint8, Shape: []int64{1}, Data: []byte{1}}},
			// the library refuses
			"duplicate": {tensorOf(t, "k", nil, []int32{1}), tensorOf(t, "k", nil, []int32{2})},
			"negative":  {{Name: "n", DType: pstate.Float32, Shape: []int64{-1}}},
		}
		for _, name := range []string{"short data", "NUL name", "duplicate", "negative"} {
			var dict []pstate.Tensor
			if src {
				dict = bad[name]
			}
			_, err := w.BroadcastTensorDict(dict, 0)
			expectErr(t, err, pstate.ErrInvalidArgument)
			var pe *pstate.Error
			if !errors.As(err, &pe) || (!src && !strings.Contains(pe.Detail, "refused its dict")) {
				t.Fatalf("%s: rank %d: %v", name, w.RankInGroup(), err)
			}
			// a binding's refusal reaches the receiver as its reason, clean: not the library's
			// refusal of the stand-in dict the sender sent
			byBinding := name == "short data" || name == "NUL name"
			if !src && byBinding && (!strings.Contains(pe.Detail, "its Go binding refused it") ||
				strings.Contains(pe.Detail, "dtype -1") || strings.Contains(pe.Detail, "pstate_")) {
				t.Fatalf("%s: the receiver's error is not the sender's reason: %v", name, err)
			}
		}
		// a bad rank is refused locally on every rank; send to oneself too
		_, err := w.BroadcastTensorDict(nil, 5)
		expectErr(t, err, pstate.ErrInvalidArgument)
		expectErr(t, w.SendTensorDict(nil, w.RankInGroup()), pstate.ErrInvalidArgument)
		// the group is still in step
		var dict []pstate.Tensor
		if src {
			dict = dictOf(t, 0)
		}
		got, err := w.BroadcastTensorDict(dict, 0)
		must(t, err)
		sameDict(t, "after refusals", got, dictOf(t, 0))
	})
}
