package pstate

// The rooted reduction and scatter of a group: pstate_reduce and pstate_scatter (MPI_Reduce /
// MPI_Scatter, torch.distributed.reduce / scatter). The buffer a rank other than the root does
// not use (Reduce's recv, Scatter's send) is the zero Buffer there.

import "pstate.dev/pstate/internal/capi"

// Reduce: on group rank root, recv (send.Len() elements) = op over the group of send; recv is
// ignored elsewhere (pass Buffer{}). On root, send and recv may be the same (in place). A recv
// the root refuses fails the call on every rank of the group at once (Group.together).
func (g *Group) Reduce(send, recv Buffer, op ReduceOp, root int, opts ...CallOption) error {
	o := collect(opts)
	op_ := g.op("Reduce")
	err := firstError(
		func() error { return checkOp(op_, op) },
		func() error { return send.check(op_, "send", 0) },
		func() error {
			if g.info.RankInGroup != root {
				return nil
			}
			return rootBuffer(op_, "recv", "the root", root, recv, send.dtype, send.count)
		})
	if err := g.together("Reduce", err, func(h uintptr) error {
		return capi.Reduce(h, nil, nil, 1, refusedDType, int(Sum), 0, 0)
	}); err != nil {
		return err
	}
	return g.call("Reduce", func(h uintptr) error {
		return capi.Reduce(h, send.p, recv.p, int64(send.count), int(send.dtype), int(op), root, o.stream)
	})
}

// Scatter: send on group rank root holds WorldSize blocks of recv.Len() elements; block r lands
// in recv on group rank r. send is ignored elsewhere (pass Buffer{}). A send the root refuses
// fails the call on every rank of the group at once (Group.together).
func (g *Group) Scatter(send, recv Buffer, root int, opts ...CallOption) error {
	o := collect(opts)
	op := g.op("Scatter")
	err := firstError(
		func() error { return recv.check(op, "recv", 0) },
		func() error {
			if g.info.RankInGroup != root {
				return nil
			}
			return rootBuffer(op, "send", "the root", root, send, recv.dtype, recv.count*g.info.WorldSize)
		})
	if err := g.together("Scatter", err, func(h uintptr) error {
		return capi.Scatter(h, nil, nil, 1, refusedDType, 0, 0)
	}); err != nil {
		return err
	}
	return g.call("Scatter", func(h uintptr) error {
		return capi.Scatter(h, send.p, recv.p, int64(recv.count), int(recv.dtype), root, o.stream)
	})
}

// Reduce returns the reduction of every rank's send on group rank root (nil elsewhere).
func Reduce[T Element](g *Group, send []T, op ReduceOp, root int) ([]T, error) {
	if g.RankInGroup() != root {
		return nil, g.Reduce(Slice(send), Buffer{}, op, root)
	}
	out := make([]T, len(send))
	return out, g.Reduce(Slice(send), Slice(out), op, root)
}

// Scatter returns this rank's block (count elements) of root's send, which holds WorldSize
// blocks there; send is ignored (may be nil) on the other ranks.
func Scatter[T Element](g *Group, send []T, count, root int) ([]T, error) {
	if count < 0 {
		return nil, g.together("Scatter", invalid(g.op("Scatter"), "count %d is negative", count), func(h uintptr) error {
			return capi.Scatter(h, nil, nil, 1, refusedDType, 0, 0)
		})
	}
	out := make([]T, count)
	if g.RankInGroup() != root {
		return out, g.Scatter(Buffer{}, Slice(out), root)
	}
	return out, g.Scatter(Slice(send), Slice(out), root)
}
