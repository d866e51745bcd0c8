package pstate_test

import (
	"strings"
	"testing"

	"pstate.dev/pstate"
)

// On 4 ranks (TP 2 x PP 2): AllGatherV / ReduceScatterV with uneven counts (a zero among them),
// an Isend/Irecv ring (Wait, Test, the send slice reused at once), a P2PBatch with every peer
// listed in reverse order, a custom group of ranks 0-2 (rank 3 joins none), sliced tensor dicts
// from PP stage 0 to stage 1 gathered over TP, and the errors of the binding and the library.
func TestVariableCountsRequestsBatchCustomGroupSlicedDictsFourRanks(t *testing.T) {
	onRanks(t, 4, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Abort()
		must(t, ps.InitializeModelParallel(pstate.ParallelConfig{PipelineParallel: 2}))
		w := mustGroup(t, ps, pstate.World)
		r, n := w.RankInGroup(), w.WorldSize()

		counts := []int{2, 0, 3, 1}
		mine := make([]float32, counts[r])
		for k := range mine {
			mine[k] = float32(100*r + k)
		}
		got, err := pstate.AllGatherV(w, mine, counts)
		must(t, err)
		var want []float32
		for i, c := range counts {
			for k := 0; k < c; k++ {
				want = append(want, float32(100*i+k))
			}
		}
		check(t, "AllGatherV", got, want)

		rs := []int{1, 3, 0, 2}
		send := make([]int64, 6)
		for k := range send {
			send[k] = int64(k * (r + 1))
		}
		part, err := pstate.ReduceScatterV(w, send, rs, pstate.Sum)
		must(t, err)
		off := 0
		for i := 0; i < r; i++ {
			off += rs[i]
		}
		wantPart := make([]int64, rs[r])
		for k := range wantPart {
			wantPart[k] = int64((off + k) * (1 + 2 + 3 + 4))
		}
		check(t, "ReduceScatterV", part, wantPart)
		expectErr(t, w.AllGatherV(pstate.Slice(mine), pstate.Slice(got), []int{1, 1}), pstate.ErrInvalidArgument)
		_, err = pstate.ReduceScatterV(w, send[:5], rs, pstate.Sum)
		expectErr(t, err, pstate.ErrInvalidArgument)
		if err == nil || !strings.Contains(err.Error(), "sum(counts) is 6") {
			t.Fatalf("ReduceScatterV error: %v", err)
		}

		// ring: the send slice is overwritten right after Isend (it was copied)
		next, prev := (r+1)%n, (r+n-1)%n
		out := []float32{float32(r), float32(r), float32(r)}
		sreq, err := pstate.Isend(w, out, next)
		must(t, err)
		out[0] = -1
		in := make([]float32, 3)
		rreq, err := pstate.Irecv(w, in, prev)
		must(t, err)
		must(t, rreq.Wait())
		must(t, sreq.Wait())
		check(t, "Irecv", in, []float32{float32(prev), float32(prev), float32(prev)})
		must(t, rreq.Wait()) // completed: the same result again
		in2 := make([]int64, 2)
		rreq, err = pstate.Irecv(w, in2, prev)
		must(t, err)
		must(t, pstate.Send(w, []int64{int64(r), int64(10 * r)}, next))
		for {
			done, err := rreq.Test()
			must(t, err)
			if done {
				break
			}
		}
		check(t, "Test", in2, []int64{int64(prev), int64(10 * prev)})

		// batch with every peer, in reverse order
		recvs := make([][]int32, n)
		var ops []pstate.P2POp
		for p := n - 1; p >= 0; p-- {
			if p == r {
				continue
			}
			recvs[p] = make([]int32, 2)
			ops = append(ops, pstate.P2POp{IsSend: false, Buf: pstate.Slice(recvs[p]), Peer: p},
				pstate.P2POp{IsSend: true, Buf: pstate.Slice([]int32{int32(r), int32(p)}), Peer: p})
		}
		must(t, w.P2PBatch(ops))
		for p := range recvs {
			if p != r {
				check(t, "P2PBatch", recvs[p], []int32{int32(p), int32(r)})
			}
		}
		must(t, w.P2PBatch(nil))
		expectErr(t, w.P2PBatch([]pstate.P2POp{{IsSend: true, Buf: pstate.Slice([]int32{1}), Peer: n}}), pstate.ErrInvalidArgument)

		// custom group
		join := []int{0, 1, 2}
		if r == 3 {
			join = nil
		}
		g, err := ps.NewGroup(join)
		must(t, err)
		if r == 3 {
			if g != nil {
				t.Fatalf("NewGroup(nil) = %v", g.Name())
			}
		} else {
			if g.Kind() != pstate.Custom || !strings.HasPrefix(g.Name(), "custom:") || g.WorldSize() != 3 {
				t.Fatalf("custom group %+v", g.Info())
			}
			x := []float32{float32(r + 1)}
			must(t, pstate.AllReduce(g, x, pstate.Sum))
			check(t, "AllReduce on custom", x, []float32{6})
		}
		_, err = ps.NewGroup([]int{0, 2, 1, 3})
		expectErr(t, err, pstate.ErrInvalidArgument)

		// sliced dicts: stage 0 -> stage 1 over PP, sliced over TP
		tp, pp := mustGroup(t, ps, pstate.TP), mustGroup(t, ps, pstate.PP)
		h, err := pstate.NewTensor("h", []int64{2, 4}, []float32{0, 1, 2, 3, 4, 5, 6, 7})
		must(t, err)
		odd, err := pstate.NewTensor("odd", []int64{3}, []int64{0, 1, 2})
		must(t, err)
		if pp.RankInGroup() == 0 {
			must(t, pp.SendTensorDictSliced([]pstate.Tensor{h, odd}, 1, tp))
		} else {
			d, err := pp.RecvTensorDictSliced(0, tp)
			must(t, err)
			if len(d) != 2 || d[0].Name != "h" || d[1].Name != "odd" {
				t.Fatalf("sliced dict %+v", d)
			}
			hv, err := pstate.TensorValues[float32](d[0])
			must(t, err)
			check(t, "sliced h", hv, []float32{0, 1, 2, 3, 4, 5, 6, 7})
			ov, err := pstate.TensorValues[int64](d[1])
			must(t, err)
			check(t, "sliced odd", ov, []int64{0, 1, 2})
		}
		_, err = pp.RecvTensorDictSliced(0, nil)
		expectErr(t, err, pstate.ErrInvalidArgument)

		// a receive of another size fails its Wait
		if r == 0 {
			req, err := pstate.Isend(w, []float32{1, 2, 3}, 1)
			must(t, err)
			must(t, req.Wait())
		} else if r == 1 {
			req, err := pstate.Irecv(w, make([]float32, 2), 0)
			must(t, err)
			expectErr(t, req.Wait(), pstate.ErrMismatch)
			expectErr(t, req.Wait(), pstate.ErrMismatch)
		}
	})
}
