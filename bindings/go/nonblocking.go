package pstate

// Variable-count collectives (pstate_all_gatherv, pstate_reduce_scatterv), non-blocking
// point-to-point (pstate_isend/irecv + pstate_wait/test), batched point-to-point
// (pstate_p2p_batch), custom groups (pstate_new_group) and sliced tensor dicts
// (pstate_send/recv_tensor_dict_sliced).
//
// Requests and batches stage host buffers in C memory: C keeps a pending request's buffer after
// Isend/Irecv return, and a batch's op array holds buffer pointers, but cgo lets C keep no Go
// memory and store no Go pointer in memory (Go 1.19 cannot pin). Isend copies its buffer into C
// memory at once (the Go slice may be reused right after Isend returns); Irecv receives into C
// memory and copies into the Go slice when the request completes (Wait, or Test returning true).
// Device buffers (CUDA contexts) are passed as they are.

import (
	"fmt"
	"runtime"
	"unsafe"

	"pstate.dev/pstate/internal/capi"
)

func (g *Group) counts(op string, counts []int) ([]uint64, int, error) {
	if len(counts) != g.info.WorldSize {
		return nil, 0, invalid(g.op(op), "counts has %d entries, the group has %d ranks (one count per group rank)",
			len(counts), g.info.WorldSize)
	}
	c := make([]uint64, len(counts))
	total := 0
	for i, n := range counts {
		if n < 0 {
			return nil, 0, invalid(g.op(op), "counts[%d] is %d, counts must be >= 0", i, n)
		}
		c[i] = uint64(n)
		total += n
	}
	return c, total, nil
}

// AllGatherV is SGLang's all_gatherv with sizes: counts[i] is group rank i's element count (the
// same slice on every rank); send holds counts[RankInGroup] elements; recv (sum(counts)) gets
// every rank's part packed in group-rank order.
func (g *Group) AllGatherV(send, recv Buffer, counts []int, opts ...CallOption) error {
	o := collect(opts)
	op := g.op("AllGatherV")
	var c []uint64
	var total int
	err := firstError(
		func() (err error) { c, total, err = g.counts("AllGatherV", counts); return err },
		func() error {
			if mine := counts[g.info.RankInGroup]; send.count != mine {
				return invalid(op, "send holds %d elements but counts[%d] (this rank) is %d",
					send.count, g.info.RankInGroup, mine)
			}
			return nil
		},
		func() error { return sameDType(op, send, recv) },
		func() error { return recv.check(op, "recv", total) })
	if err := g.together("AllGatherV", err, func(h uintptr) error {
		return capi.All_gatherv(h, nil, nil, ones(g.info.WorldSize), refusedDType, 0)
	}); err != nil {
		return err
	}
	return g.call("AllGatherV", func(h uintptr) error {
		return capi.All_gatherv(h, send.p, recv.p, c, int(send.dtype), o.stream)
	})
}

// ReduceScatterV is SGLang's reduce_scatterv with sizes: send holds sum(counts) elements; group
// rank i receives in recv the reduction of the counts[i] elements at offset counts[0] + ... +
// counts[i-1].
func (g *Group) ReduceScatterV(send, recv Buffer, counts []int, op ReduceOp, opts ...CallOption) error {
	o := collect(opts)
	op_ := g.op("ReduceScatterV")
	var c []uint64
	var total int
	err := firstError(
		func() error { return checkOp(op_, op) },
		func() (err error) { c, total, err = g.counts("ReduceScatterV", counts); return err },
		func() error {
			if send.count != total {
				return invalid(op_, "send holds %d elements but sum(counts) is %d", send.count, total)
			}
			return nil
		},
		func() error { return sameDType(op_, send, recv) },
		func() error { return recv.check(op_, "recv", counts[g.info.RankInGroup]) })
	if err := g.together("ReduceScatterV", err, func(h uintptr) error {
		return capi.Reduce_scatterv(h, nil, nil, ones(g.info.WorldSize), refusedDType, int(Sum), 0)
	}); err != nil {
		return err
	}
	return g.call("ReduceScatterV", func(h uintptr) error {
		return capi.Reduce_scatterv(h, send.p, recv.p, c, int(send.dtype), int(op), o.stream)
	})
}

// AllGatherV returns every rank's send (len(send) == counts[RankInGroup]) packed in group-rank
// order.
func AllGatherV[T Element](g *Group, send []T, counts []int) ([]T, error) {
	total := 0
	for _, n := range counts {
		if n > 0 {
			total += n
		}
	}
	out := make([]T, total)
	return out, g.AllGatherV(Slice(send), Slice(out), counts)
}

// ReduceScatterV returns this rank's part (counts[RankInGroup] elements) of the reduction of
// send (sum(counts) elements).
func ReduceScatterV[T Element](g *Group, send []T, counts []int, op ReduceOp) ([]T, error) {
	r := g.RankInGroup()
	if len(counts) != g.WorldSize() || counts[r] < 0 {
		_, _, err := g.counts("ReduceScatterV", counts)
		return nil, err
	}
	out := make([]T, counts[r])
	return out, g.ReduceScatterV(Slice(send), Slice(out), counts, op)
}

// Request is a pending Isend or Irecv (SGLang's P2PWork). Complete it with Wait, or with Test
// until it reports true; until then an Irecv's slice is not written. Completing it a second time
// returns the first result again. A request never completed keeps its C staging memory (and the
// C request, a few dozen bytes): always Wait.
type Request struct {
	g       *Group
	op      string
	h       uintptr        // C request; 0 once completed
	buf     Buffer         // the caller's buffer (keeps a Go slice alive)
	staging unsafe.Pointer // C memory of a host buffer; nil for device buffers
	recv    bool
	err     error
}

func (g *Group) post(op string, buf Buffer, peer int, recv bool, opts []CallOption) (*Request, error) {
	o := collect(opts)
	if err := buf.check(g.op(op), "buf", 0); err != nil {
		return nil, err
	}
	r := &Request{g: g, op: g.op(op), buf: buf, recv: recv}
	p := buf.p
	if !buf.device {
		n := buf.count * buf.dtype.Size()
		r.staging = capi.CAlloc(n)
		if r.staging == nil {
			return nil, &Error{Status: StatusNoMemory, Op: r.op, Detail: "no C memory to stage the buffer"}
		}
		if !recv && n > 0 {
			copy(unsafe.Slice((*byte)(r.staging), n), unsafe.Slice((*byte)(buf.p), n))
		}
		p = r.staging
	}
	var req uintptr // a local: cgo refuses a pointer into r, which holds Go pointers
	err := g.call(op, func(h uintptr) error {
		if recv {
			return capi.Irecv(h, p, int64(buf.count), int(buf.dtype), peer, o.stream, &req)
		}
		return capi.Isend(h, p, int64(buf.count), int(buf.dtype), peer, o.stream, &req)
	})
	if err != nil {
		capi.CFree(r.staging)
		return nil, err
	}
	r.h = req
	return r, nil
}

// Isend posts a send of buf to group rank dst and returns at once. A host buffer is copied
// first, so the slice may be reused immediately; the transfer runs during later pstate calls
// on the context and the request's Wait/Test.
func (g *Group) Isend(buf Buffer, dst int, opts ...CallOption) (*Request, error) {
	return g.post("Isend", buf, dst, false, opts)
}

// Irecv posts a receive of exactly buf.Len() elements from group rank src; buf is filled when the
// request completes (Wait, or Test returning true).
func (g *Group) Irecv(buf Buffer, src int, opts ...CallOption) (*Request, error) {
	return g.post("Irecv", buf, src, true, opts)
}

// Isend posts a send of buf to group rank dst (see Group.Isend).
func Isend[T Element](g *Group, buf []T, dst int) (*Request, error) { return g.Isend(Slice(buf), dst) }

// Irecv posts a receive into buf from group rank src (see Group.Irecv).
func Irecv[T Element](g *Group, buf []T, src int) (*Request, error) { return g.Irecv(Slice(buf), src) }

// finish records the result of the call that freed the C request.
func (r *Request) finish(err error) {
	r.h = 0
	r.err = err
	if r.staging != nil {
		if err == nil && r.recv {
			n := r.buf.count * r.buf.dtype.Size()
			copy(unsafe.Slice((*byte)(r.buf.p), n), unsafe.Slice((*byte)(r.staging), n))
		}
		capi.CFree(r.staging)
		r.staging = nil
	}
	runtime.KeepAlive(r.buf.p)
}

// drive runs fn on the request with the context's lock held (C: one thread at a time per
// context). After Close/Abort it still runs, so that the C request is freed (ErrAborted).
func (r *Request) drive(fn func() error) error {
	ps := r.g.ps
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return wrap(fn(), r.op)
}

// Done reports whether the request completed.
func (r *Request) Done() bool { return r.h == 0 }

// Wait blocks until the request completes (at most the context timeout) and returns its error:
// ErrMismatch for a message of another size, ErrTimeout, ErrPeerLost, ErrAborted after Close or
// Abort.
func (r *Request) Wait() error {
	if r.h == 0 {
		return r.err
	}
	h := r.h
	err := r.drive(func() error { return capi.Wait(h) })
	r.finish(err)
	return err
}

// Test progresses the transfer once without blocking: true (and the operation's error) when the
// request completed, false while it is pending.
func (r *Request) Test() (bool, error) {
	if r.h == 0 {
		return true, r.err
	}
	h := r.h
	var done int32
	err := r.drive(func() error { return capi.Test(h, &done) })
	if done == 0 {
		// pending (err nil), or an error of the call itself: the request stays valid
		return false, err
	}
	r.finish(err)
	return true, err
}

// P2POp is one send (IsSend) or receive of a P2PBatch: Buf to or from group rank Peer.
type P2POp struct {
	IsSend bool
	Buf    Buffer
	Peer   int
}

// P2PBatch is torch's batch_isend_irecv, completed: every op runs as one batch (any listing
// order, no deadlock) and P2PBatch returns when all are done. Sends to one peer match that
// peer's receives from this rank in list order. Host buffers are staged in C memory.
func (g *Group) P2PBatch(ops []P2POp, opts ...CallOption) error {
	o := collect(opts)
	op := g.op("P2PBatch")
	arr := capi.NewP2POps(len(ops))
	if arr == nil {
		return &Error{Status: StatusNoMemory, Op: op, Detail: "no C memory for the ops"}
	}
	defer arr.Free()
	staging := make([]unsafe.Pointer, len(ops))
	defer func() {
		for _, p := range staging {
			capi.CFree(p)
		}
	}()
	for i, x := range ops {
		if err := x.Buf.check(op, fmt.Sprintf("ops[%d].Buf", i), 0); err != nil {
			return err
		}
		p := x.Buf.p
		if !x.Buf.device {
			n := x.Buf.count * x.Buf.dtype.Size()
			staging[i] = capi.CAlloc(n)
			if staging[i] == nil {
				return &Error{Status: StatusNoMemory, Op: op, Detail: "no C memory to stage the buffers"}
			}
			if x.IsSend && n > 0 {
				copy(unsafe.Slice((*byte)(staging[i]), n), unsafe.Slice((*byte)(x.Buf.p), n))
			}
			p = staging[i]
		}
		arr.Set(i, x.IsSend, p, x.Buf.count, int(x.Buf.dtype), x.Peer)
	}
	if err := g.call("P2PBatch", func(h uintptr) error { return capi.P2p_batch(h, arr, o.stream) }); err != nil {
		return err
	}
	for i, x := range ops {
		if !x.IsSend && staging[i] != nil {
			n := x.Buf.count * x.Buf.dtype.Size()
			copy(unsafe.Slice((*byte)(x.Buf.p), n), unsafe.Slice((*byte)(staging[i]), n))
		}
	}
	return nil
}

// NewGroup is SGLang's create_custom_parallel_group (vLLM's new_group): collective over the
// world, every rank passing the global ranks of the group it joins (strictly ascending, itself
// among them) or none (nil: it joins no group and gets nil, nil). The group's kind is Custom,
// its name "custom:<n>"; DestroyModelParallel retires it like the model-parallel groups.
func (ps *PState) NewGroup(ranks []int) (*Group, error) {
	c := make([]int32, len(ranks))
	for i, r := range ranks {
		c[i] = int32(r)
	}
	var g *Group
	err := ps.call("NewGroup", func(h uintptr) error {
		var gh uintptr
		if err := capi.New_group(h, c, &gh); err != nil {
			return err
		}
		if gh == 0 {
			return nil
		}
		info := capi.NewPstate_group_info_t()
		defer capi.DeletePstate_group_info_t(info)
		if err := capi.Group_info(gh, info); err != nil {
			return err
		}
		g = &Group{ps: ps, h: gh, kind: Custom, gen: ps.gen, info: GroupInfo{
			Kind: Custom, Name: info.GetName(), Rank: info.GetRank(), RankInGroup: info.GetRank_in_group(),
			WorldSize: info.GetWorld_size(), LocalRank: info.GetLocal_rank(), FirstRank: info.GetFirst_rank(),
			LastRank: info.GetLast_rank(), NextRank: info.GetNext_rank(), PrevRank: info.GetPrev_rank(),
		}}
		return nil
	})
	return g, err
}

func (g *Group) agHandle(op string, ag *Group) (uintptr, error) {
	if ag == nil || ag.ps != g.ps {
		return 0, invalid(g.op(op), "ag must be a group of the same PState")
	}
	if ag.kind != World && ag.gen != g.ps.gen {
		return 0, badState(g.op(op), "group %s was destroyed by DestroyModelParallel (or Shrink/Grow)", ag.info.Name)
	}
	return ag.h, nil
}

// SendTensorDictSliced is SendTensorDict with all_gather_group ag (SGLang): a tensor whose element
// count divides by ag's size S > 1 goes as this rank's 1/S slice; the receiver gathers it whole
// over its own ag (RecvTensorDictSliced).
func (g *Group) SendTensorDictSliced(tensors []Tensor, dst int, ag *Group) error {
	a, err := g.agHandle("SendTensorDictSliced", ag)
	if err != nil {
		return err
	}
	return g.sendDict("SendTensorDictSliced", tensors, func(h uintptr, arr *capi.TensorArray) error {
		return capi.Send_tensor_dict_sliced(h, arr, dst, a, 0)
	})
}

// RecvTensorDictSliced receives the next dict sent with SendTensorDictSliced by group rank src;
// collective over ag (every rank of ag calls it, each from its own sender); every tensor arrives
// whole.
func (g *Group) RecvTensorDictSliced(src int, ag *Group) ([]Tensor, error) {
	a, err := g.agHandle("RecvTensorDictSliced", ag)
	if err != nil {
		return nil, err
	}
	return g.receiveDict("RecvTensorDictSliced", func(h uintptr, d *capi.ReceivedDict) error {
		return capi.Recv_tensor_dict_sliced(h, src, a, d, 0)
	})
}

// vcounts checks one side of an AllToAllV (counts and displacements of one entry per group rank,
// >= 0) and returns them as C wants them and the elements the side spans (the largest
// displacement + count of a non-empty part).
func (g *Group) vcounts(op, side string, counts, displs []int) ([]uint64, []uint64, int, error) {
	n := g.info.WorldSize
	if len(counts) != n || len(displs) != n {
		return nil, nil, 0, invalid(g.op(op), "%s counts and displacements have %d and %d entries, the group has %d "+
			"ranks (one of each per group rank)", side, len(counts), len(displs), n)
	}
	c, d := make([]uint64, n), make([]uint64, n)
	extent := 0
	for j := 0; j < n; j++ {
		if counts[j] < 0 || displs[j] < 0 {
			return nil, nil, 0, invalid(g.op(op), "%s counts[%d] = %d, displs[%d] = %d: both must be >= 0",
				side, j, counts[j], j, displs[j])
		}
		c[j], d[j] = uint64(counts[j]), uint64(displs[j])
		if end := displs[j] + counts[j]; counts[j] > 0 && end > extent {
			extent = end
		}
	}
	return c, d, extent, nil
}

// AllToAllV is MPI_Alltoallv (pstate_all_to_all_v): sendCounts[j] elements at sendDispls[j] of
// send go to group rank j, and recvCounts[i] elements from group rank i land at recvDispls[i] of
// recv (counts and displacements in elements, one entry per group rank). Every pair must agree
// (this rank's sendCounts[j] is rank j's recvCounts[this rank]), else ErrMismatch on every rank.
func (g *Group) AllToAllV(send Buffer, sendCounts, sendDispls []int, recv Buffer, recvCounts, recvDispls []int,
	opts ...CallOption) error {
	o := collect(opts)
	op := g.op("AllToAllV")
	var sc, sd, rc, rd []uint64
	var sendExtent, recvExtent int
	err := firstError(
		func() (err error) {
			sc, sd, sendExtent, err = g.vcounts("AllToAllV", "send", sendCounts, sendDispls)
			return err
		},
		func() (err error) {
			rc, rd, recvExtent, err = g.vcounts("AllToAllV", "recv", recvCounts, recvDispls)
			return err
		},
		func() error { return sameDType(op, send, recv) },
		func() error { return send.check(op, "send", sendExtent) },
		func() error { return recv.check(op, "recv", recvExtent) })
	if err := g.together("AllToAllV", err, func(h uintptr) error {
		return capi.All_to_all_v(h, nil, nil, nil, nil, nil, nil, refusedDType, 0)
	}); err != nil {
		return err
	}
	return g.call("AllToAllV", func(h uintptr) error {
		return capi.All_to_all_v(h, send.p, sc, sd, recv.p, rc, rd, int(send.dtype), o.stream)
	})
}

// AllToAllV sends sendCounts[j] elements of send (packed in group-rank order) to group rank j and
// returns what arrived, packed in group-rank order (recvCounts[i] elements from rank i).
func AllToAllV[T Element](g *Group, send []T, sendCounts, recvCounts []int) ([]T, error) {
	packed := func(counts []int) []int {
		displs, at := make([]int, len(counts)), 0
		for i, n := range counts {
			displs[i] = at
			if n > 0 {
				at += n
			}
		}
		return displs
	}
	total := 0
	for _, n := range recvCounts {
		if n > 0 {
			total += n
		}
	}
	out := make([]T, total)
	return out, g.AllToAllV(Slice(send), sendCounts, packed(sendCounts), Slice(out), recvCounts, packed(recvCounts))
}
