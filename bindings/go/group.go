package pstate

import (
	"fmt"
	"time"

	"pstate.dev/pstate/internal/capi"
)

// GroupInfo is pstate_group_info_t: SGLang's GroupCoordinator properties as seen from this rank.
type GroupInfo struct {
	Kind        GroupKind
	Name        string // "<kind>:<index among its kind>", e.g. "tp:0"
	Rank        int    // global rank
	RankInGroup int
	WorldSize   int // ranks in the group
	LocalRank   int
	FirstRank   int
	LastRank    int
	NextRank    int
	PrevRank    int
}

// Group is one group of a PState. Ranks passed to its operations are ranks in the group. It is
// valid until DestroyModelParallel (model-parallel kinds) or Close/Abort (all kinds); using it
// afterwards returns ErrInvalidState.
type Group struct {
	ps   *PState
	h    uintptr
	kind GroupKind
	gen  int
	info GroupInfo
}

// CallOption adjusts one operation.
type CallOption func(*callOptions)

type callOptions struct{ stream uintptr }

// OnStream enqueues the operation on a cudaStream_t (CUDA contexts; default: the context's).
func OnStream(stream uintptr) CallOption { return func(o *callOptions) { o.stream = stream } }

func collect(opts []CallOption) callOptions {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Info returns the group's facts.
func (g *Group) Info() GroupInfo { return g.info }

// Kind is the kind the group was asked for as.
func (g *Group) Kind() GroupKind { return g.kind }

// Name is "<kind>:<index>".
func (g *Group) Name() string { return g.info.Name }

// RankInGroup is this rank's index in the group.
func (g *Group) RankInGroup() int { return g.info.RankInGroup }

// WorldSize is the number of ranks in the group.
func (g *Group) WorldSize() int { return g.info.WorldSize }

// op is "<method> on <group name>", how the errors of a call on the group name it.
func (g *Group) op(method string) string { return method + " on " + g.info.Name }

// call runs fn on the group's live handle with the PState's lock held.
func (g *Group) call(op string, fn func(h uintptr) error) error {
	return g.ps.call(g.op(op), func(uintptr) error {
		if g.kind != World && g.gen != g.ps.gen {
			return &capi.StatusError{Status: int(StatusInvalidState), Message: fmt.Sprintf(
				"group %s was destroyed by DestroyModelParallel (or Shrink/Grow); get it again after InitializeModelParallel", g.info.Name)}
		}
		return fn(g.h)
	})
}

// refusedDType is the dtype of a collective's refused form (see together).
const refusedDType = int(Int8)

// together returns err, the binding's refusal of a collective's arguments, after taking part in
// the call: refuse is the C call in its refused form (NULL buffers of one element, refusedDType),
// which C refuses on this rank inside the call's agreement, so every rank of the group fails at
// once (ErrInvalidArgument naming this rank there) and none pairs the call with this rank's next
// one. Most checks see what only this rank sees (its buffers, a root's recv or send): a rank that
// returned alone would leave the others inside the call, and they would return another call's
// data without an error (issue 46). A nil err is returned at once.
func (g *Group) together(method string, err error, refuse func(h uintptr) error) error {
	if err != nil {
		_ = g.call(method, refuse) // C refuses it; the binding's error says more
	}
	return err
}

// firstError is the first non-nil of errs (the checks of one call, in order).
func firstError(errs ...func() error) error {
	for _, f := range errs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// ones is a counts array of n ones (a v-collective's refused form).
func ones(n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// Ranks are the global ranks of the group, in group order.
func (g *Group) Ranks() ([]int, error) {
	ranks := make([]int32, g.info.WorldSize)
	var n uint64
	err := g.call("Ranks", func(h uintptr) error { return capi.Group_ranks(h, ranks, &n) })
	if err != nil {
		return nil, err
	}
	out := make([]int, n)
	for i := range out {
		out[i] = int(ranks[i])
	}
	return out, nil
}

// SameNode is SGLang's in_the_same_node_as: for each group rank, whether it shares a host with
// group rank source (pstate_group_same_node's root). Local, not collective.
func (g *Group) SameNode(source int) ([]bool, error) {
	flags := make([]int32, g.info.WorldSize)
	var n uint64
	if err := g.call("SameNode", func(h uintptr) error { return capi.Group_same_node(h, source, flags, &n) }); err != nil {
		return nil, err
	}
	out := make([]bool, n)
	for i, f := range flags[:n] {
		out[i] = f != 0
	}
	return out, nil
}

// SetTimeout bounds every later call of this group on this rank by timeout instead of the
// context's timeout (0: the context's again); a call past it returns a TIMEOUT error naming the
// group's timeout and fails the context as any timeout does. Local, not collective: set it alike
// on every rank (pstate_group_set_timeout; docs/timeouts.md).
func (g *Group) SetTimeout(timeout time.Duration) error {
	if timeout < 0 {
		return g.call("SetTimeout", func(h uintptr) error { return capi.Group_set_timeout(h, -1) })
	}
	ms := int64((timeout + time.Millisecond - 1) / time.Millisecond)
	return g.call("SetTimeout", func(h uintptr) error { return capi.Group_set_timeout(h, ms) })
}

// Timeout is the timeout of this group's calls on this rank: its own (SetTimeout) or the
// context's.
func (g *Group) Timeout() (time.Duration, error) {
	var ms int64
	if err := g.call("Timeout", func(h uintptr) error { return capi.Group_timeout(h, &ms) }); err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// AllReduce: recv[i] = op over the group of send[i]. send and recv may be the same (in place).
func (g *Group) AllReduce(send, recv Buffer, op ReduceOp, opts ...CallOption) error {
	o := collect(opts)
	op_ := g.op("AllReduce")
	err := firstError(
		func() error { return checkOp(op_, op) },
		func() error { return send.check(op_, "send", 0) },
		func() error { return sameDType(op_, send, recv) },
		func() error { return recv.check(op_, "recv", send.count) })
	if err := g.together("AllReduce", err, func(h uintptr) error {
		return capi.All_reduce(h, nil, nil, 1, refusedDType, int(Sum), 0)
	}); err != nil {
		return err
	}
	return g.call("AllReduce", func(h uintptr) error {
		return capi.All_reduce(h, send.p, recv.p, int64(send.count), int(send.dtype), int(op), o.stream)
	})
}

// AllGather: recv (WorldSize * send.Len() elements) = every rank's send in group-rank order.
func (g *Group) AllGather(send, recv Buffer, opts ...CallOption) error {
	o := collect(opts)
	op := g.op("AllGather")
	err := firstError(
		func() error { return send.check(op, "send", 0) },
		func() error { return sameDType(op, send, recv) },
		func() error { return recv.check(op, "recv", send.count*g.info.WorldSize) })
	if err := g.together("AllGather", err, func(h uintptr) error {
		return capi.All_gather(h, nil, nil, 1, refusedDType, 0)
	}); err != nil {
		return err
	}
	return g.call("AllGather", func(h uintptr) error {
		return capi.All_gather(h, send.p, recv.p, int64(send.count), int(send.dtype), o.stream)
	})
}

// ReduceScatter: send holds WorldSize blocks of recv.Len() elements; this rank receives block
// RankInGroup of their reduction.
func (g *Group) ReduceScatter(send, recv Buffer, op ReduceOp, opts ...CallOption) error {
	o := collect(opts)
	op_ := g.op("ReduceScatter")
	err := firstError(
		func() error { return checkOp(op_, op) },
		func() error { return recv.check(op_, "recv", 0) },
		func() error { return sameDType(op_, send, recv) },
		func() error { return send.check(op_, "send", recv.count*g.info.WorldSize) })
	if err := g.together("ReduceScatter", err, func(h uintptr) error {
		return capi.Reduce_scatter(h, nil, nil, 1, refusedDType, int(Sum), 0)
	}); err != nil {
		return err
	}
	return g.call("ReduceScatter", func(h uintptr) error {
		return capi.Reduce_scatter(h, send.p, recv.p, int64(recv.count), int(send.dtype), int(op), o.stream)
	})
}

// Broadcast copies buf of group rank src into buf on every rank.
func (g *Group) Broadcast(buf Buffer, src int, opts ...CallOption) error {
	o := collect(opts)
	if err := g.together("Broadcast", buf.check(g.op("Broadcast"), "buf", 0), func(h uintptr) error {
		return capi.Broadcast(h, nil, 1, refusedDType, 0, 0)
	}); err != nil {
		return err
	}
	return g.call("Broadcast", func(h uintptr) error {
		return capi.Broadcast(h, buf.p, int64(buf.count), int(buf.dtype), src, o.stream)
	})
}

// Gather: on group rank dst, recv (WorldSize * send.Len()) = every rank's send in rank order;
// recv is ignored elsewhere (pass Buffer{}). A recv dst refuses fails the call on every rank of
// the group at once (ErrInvalidArgument naming dst there), so no rank pairs it with another call.
func (g *Group) Gather(send, recv Buffer, dst int, opts ...CallOption) error {
	o := collect(opts)
	op := g.op("Gather")
	err := firstError(
		func() error { return send.check(op, "send", 0) },
		func() error {
			if g.info.RankInGroup != dst {
				return nil
			}
			return rootBuffer(op, "recv", "dst", dst, recv, send.dtype, send.count*g.info.WorldSize)
		})
	if err := g.together("Gather", err, func(h uintptr) error {
		return capi.Gather(h, nil, nil, 1, refusedDType, 0, 0)
	}); err != nil {
		return err
	}
	return g.call("Gather", func(h uintptr) error {
		return capi.Gather(h, send.p, recv.p, int64(send.count), int(send.dtype), dst, o.stream)
	})
}

// AllToAll: block j of send (send.Len()/WorldSize elements) goes to group rank j; block i of
// recv comes from rank i.
func (g *Group) AllToAll(send, recv Buffer, opts ...CallOption) error {
	o := collect(opts)
	op := g.op("AllToAll")
	n := g.info.WorldSize
	err := firstError(
		func() error { return send.check(op, "send", 0) },
		func() error {
			if n == 0 || send.count%n != 0 {
				return invalid(op, "send holds %d elements, not a multiple of the group size %d", send.count, n)
			}
			return nil
		},
		func() error { return sameDType(op, send, recv) },
		func() error { return recv.check(op, "recv", send.count) })
	if err := g.together("AllToAll", err, func(h uintptr) error {
		return capi.All_to_all(h, nil, nil, 1, refusedDType, 0)
	}); err != nil {
		return err
	}
	return g.call("AllToAll", func(h uintptr) error {
		return capi.All_to_all(h, send.p, recv.p, int64(send.count/n), int(send.dtype), o.stream)
	})
}

// Send sends buf to group rank dst (returns when buf may be reused).
func (g *Group) Send(buf Buffer, dst int, opts ...CallOption) error {
	o := collect(opts)
	if err := buf.check(g.op("Send"), "buf", 0); err != nil {
		return err
	}
	return g.call("Send", func(h uintptr) error {
		return capi.Send(h, buf.p, int64(buf.count), int(buf.dtype), dst, o.stream)
	})
}

// Recv receives exactly buf.Len() elements from group rank src (another size is ErrMismatch).
func (g *Group) Recv(buf Buffer, src int, opts ...CallOption) error {
	o := collect(opts)
	if err := buf.check(g.op("Recv"), "buf", 0); err != nil {
		return err
	}
	return g.call("Recv", func(h uintptr) error {
		return capi.Recv(h, buf.p, int64(buf.count), int(buf.dtype), src, o.stream)
	})
}

// Barrier returns once every rank of the group has entered it.
func (g *Group) Barrier() error {
	return g.call("Barrier", func(h uintptr) error { return capi.Barrier(h) })
}

// BroadcastObject: data of group rank src (any length) on every rank; other ranks' data is ignored.
func (g *Group) BroadcastObject(data []byte, src int) ([]byte, error) {
	var out capi.Bytes
	err := g.call("BroadcastObject", func(h uintptr) error { return capi.Broadcast_object(h, data, src, &out) })
	if err != nil {
		return nil, err
	}
	return out.Take(), nil
}

// AllGatherObject: every rank's data, in group-rank order.
func (g *Group) AllGatherObject(data []byte) ([][]byte, error) {
	var all capi.Bytes
	sizes := make([]uint64, g.info.WorldSize)
	var n uint64 // *count: the group size
	if err := g.call("AllGatherObject", func(h uintptr) error { return capi.All_gather_object(h, data, &all, sizes, &n) }); err != nil {
		return nil, err
	}
	joined := all.Take()
	out := make([][]byte, n)
	off := uint64(0)
	for i, s := range sizes[:n] {
		out[i] = joined[off : off+s : off+s]
		off += s
	}
	return out, nil
}

// SendObject sends data to group rank dst; the receiver learns its size.
func (g *Group) SendObject(data []byte, dst int) error {
	return g.call("SendObject", func(h uintptr) error { return capi.Send_object(h, data, dst) })
}

// RecvObject receives the next object from group rank src.
func (g *Group) RecvObject(src int) ([]byte, error) {
	var out capi.Bytes
	if err := g.call("RecvObject", func(h uintptr) error { return capi.Recv_object(h, src, &out) }); err != nil {
		return nil, err
	}
	return out.Take(), nil
}

// ---- generic helpers over slices ----------------------------------------------------------

// AllReduce reduces buf in place over the group.
func AllReduce[T Element](g *Group, buf []T, op ReduceOp) error {
	return g.AllReduce(Slice(buf), Slice(buf), op)
}

// AllGather returns every rank's send concatenated in group-rank order.
func AllGather[T Element](g *Group, send []T) ([]T, error) {
	out := make([]T, len(send)*g.WorldSize())
	return out, g.AllGather(Slice(send), Slice(out))
}

// ReduceScatter returns this rank's block of the reduction of send (len(send)/WorldSize elements).
func ReduceScatter[T Element](g *Group, send []T, op ReduceOp) ([]T, error) {
	if n := g.WorldSize(); n == 0 || len(send)%n != 0 {
		return nil, invalid(g.op("ReduceScatter"), "send holds %d elements, not a multiple of the group size %d", len(send), n)
	}
	out := make([]T, len(send)/g.WorldSize())
	return out, g.ReduceScatter(Slice(send), Slice(out), op)
}

// AllToAll returns the blocks every rank sent to this one, in group-rank order.
func AllToAll[T Element](g *Group, send []T) ([]T, error) {
	out := make([]T, len(send))
	return out, g.AllToAll(Slice(send), Slice(out))
}

// Broadcast copies buf of group rank src into buf on every rank.
func Broadcast[T Element](g *Group, buf []T, src int) error { return g.Broadcast(Slice(buf), src) }

// Gather returns every rank's send on group rank dst (nil elsewhere).
func Gather[T Element](g *Group, send []T, dst int) ([]T, error) {
	if g.RankInGroup() != dst {
		return nil, g.Gather(Slice(send), Buffer{}, dst)
	}
	out := make([]T, len(send)*g.WorldSize())
	return out, g.Gather(Slice(send), Slice(out), dst)
}

// Send sends buf to group rank dst.
func Send[T Element](g *Group, buf []T, dst int) error { return g.Send(Slice(buf), dst) }

// Recv fills buf from group rank src.
func Recv[T Element](g *Group, buf []T, src int) error { return g.Recv(Slice(buf), src) }
