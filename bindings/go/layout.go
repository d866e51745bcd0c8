package pstate

import (
	"runtime"

	"pstate.dev/pstate/internal/capi"
)

// Layout is SGLang's rank layout for a world, computed locally (pstate_layout_*; no
// communication). Close frees it (a finalizer does too).
type Layout struct {
	h         uintptr
	worldSize int
}

// NewLayout computes the groups SGLang's initialize_model_parallel builds for worldSize ranks;
// zero sizes are the defaults (ParallelConfig{PipelineParallel: 2} on 4 ranks: TP 2 x PP 2; the
// zero config: TP = worldSize).
func NewLayout(worldSize int, cfg ParallelConfig) (*Layout, error) {
	if err := cfg.check("NewLayout"); err != nil {
		return nil, err
	}
	if worldSize != int(int32(worldSize)) {
		return nil, invalid("NewLayout", "world size %d does not fit a C int", worldSize)
	}
	c := cfg.toC()
	defer capi.DeletePstate_parallel_config_t(c)
	var h uintptr
	if err := capi.Layout_create(worldSize, c, &h); err != nil {
		return nil, wrap(err, "NewLayout")
	}
	l := &Layout{h: h, worldSize: worldSize}
	runtime.SetFinalizer(l, (*Layout).Close)
	return l, nil
}

// Close frees the layout; later calls return ErrInvalidState.
func (l *Layout) Close() error {
	if l.h != 0 {
		capi.Layout_destroy(l.h)
		l.h = 0
	}
	return nil
}

func (l *Layout) live(op string) error {
	if l.h == 0 {
		return badState(op, "the Layout was closed")
	}
	return nil
}

// GroupCount is the number of groups of kind (0 for kinds this layout does not have).
func (l *Layout) GroupCount(kind GroupKind) (int, error) {
	if err := checkKind("GroupCount", kind); err != nil {
		return 0, err
	}
	if err := l.live("GroupCount"); err != nil {
		return 0, err
	}
	var n uint64
	err := capi.Layout_group_count(l.h, int(kind), &n)
	runtime.KeepAlive(l)
	return int(n), wrap(err, "GroupCount")
}

// GroupRanks are the global ranks of group index of kind, ascending.
func (l *Layout) GroupRanks(kind GroupKind, index int) ([]int, error) {
	if err := checkKind("GroupRanks", kind); err != nil {
		return nil, err
	}
	if err := l.live("GroupRanks"); err != nil {
		return nil, err
	}
	ranks := make([]int32, l.worldSize)
	var n uint64
	err := capi.Layout_group_ranks(l.h, int(kind), int64(index), ranks, &n)
	runtime.KeepAlive(l)
	if err != nil {
		return nil, wrap(err, "GroupRanks")
	}
	out := make([]int, n)
	for i := range out {
		out[i] = int(ranks[i])
	}
	return out, nil
}

// GroupOf is the index of the group of kind that contains global rank.
func (l *Layout) GroupOf(kind GroupKind, rank int) (int, error) {
	if err := checkKind("GroupOf", kind); err != nil {
		return 0, err
	}
	if err := l.live("GroupOf"); err != nil {
		return 0, err
	}
	var idx uint64
	err := capi.Layout_group_of(l.h, int(kind), rank, &idx)
	runtime.KeepAlive(l)
	return int(idx), wrap(err, "GroupOf")
}

// Groups are every group of kind, in SGLang's order.
func (l *Layout) Groups(kind GroupKind) ([][]int, error) {
	n, err := l.GroupCount(kind)
	if err != nil {
		return nil, err
	}
	out := make([][]int, n)
	for i := range out {
		if out[i], err = l.GroupRanks(kind, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Version is pstate_version() of the loaded library: MAJOR*10000 + MINOR*100 + PATCH.
func Version() int { return int(capi.Version()) }
