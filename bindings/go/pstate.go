package pstate

import (
	"errors"
	"sync"
	"time"

	"pstate.dev/pstate/internal/capi"
)

// Option sets one field of pstate_init_params_t; fields not set come from the environment.
type Option func(p capi.Pstate_init_params_t)

// WithWorldSize sets the number of ranks (default: WORLD_SIZE).
func WithWorldSize(n int) Option { return func(p capi.Pstate_init_params_t) { p.SetWorld_size(n) } }

// WithRank sets this process's global rank (default: RANK).
func WithRank(r int) Option { return func(p capi.Pstate_init_params_t) { p.SetRank(r) } }

// WithLocalRank sets the rank on this host (default: LOCAL_RANK).
func WithLocalRank(r int) Option { return func(p capi.Pstate_init_params_t) { p.SetLocal_rank(r) } }

// WithInitMethod sets "env://" (default), "tcp://HOST:PORT", "file:///PATH" or
// "etcd://HOST:PORT[,HOST:PORT...]/PREFIX".
func WithInitMethod(m string) Option {
	return func(p capi.Pstate_init_params_t) { p.SetInit_method(m) }
}

// WithDevice selects the device communicator (default CPU).
func WithDevice(d Device) Option { return func(p capi.Pstate_init_params_t) { p.SetDevice(int(d)) } }

// WithDeviceOrdinal selects the CUDA device (default: the local rank).
func WithDeviceOrdinal(i int) Option {
	return func(p capi.Pstate_init_params_t) { p.SetDevice_ordinal(i) }
}

// WithTimeout sets every blocking call's deadline (default: PSTATE_TIMEOUT_MS or 10 minutes).
func WithTimeout(d time.Duration) Option {
	return func(p capi.Pstate_init_params_t) { p.SetTimeout_ms(d.Milliseconds()) }
}

// WithJobToken sets the job's shared secret (default: PSTATE_JOB_TOKEN).
func WithJobToken(t string) Option { return func(p capi.Pstate_init_params_t) { p.SetJob_token(t) } }

// WithSocketIfname sets the network interface (default: PSTATE_SOCKET_IFNAME or by address).
func WithSocketIfname(n string) Option {
	return func(p capi.Pstate_init_params_t) { p.SetSocket_ifname(n) }
}

// PState is one rank's parallel state (pstate_t). Close it (finalize) when done, or Abort it
// after ErrPeerLost/ErrTimeout/ErrInterrupted.
type PState struct {
	mu  sync.Mutex // C: one call at a time per pstate_t
	h   uintptr    // 0 once closed
	gen int        // bumped by DestroyModelParallel, Shrink and Grow: groups from before are invalid
	// size is the world's size, read at Init and after Shrink/Grow: LiveRanks and Shrink size
	// their arrays with it after a failure, when Get_group refuses (the context failed).
	size int

	flagMu sync.Mutex // guards flag, which Interrupt uses without mu (a call may hold mu)
	flag   uintptr    // the interrupt flag in C memory (pstate_set_interrupt_check); 0 once freed

	// hMu is held while h is read to revoke it (Revoke, Abort from another goroutine, without mu)
	// and while h is taken to be freed, so pstate_revoke never reaches a freed context.
	hMu sync.Mutex

	hooks hookSet // AddHook's funcs, released when the C context is freed

	// capturing: GraphCapture succeeded and Capture.End has not (mu held): pstate_finalize then
	// refuses and frees nothing (INVALID_STATE), and Close keeps the handle.
	capturing bool
}

// Init is init_distributed_environment: rendezvous with the other ranks and return this rank's
// PState with the world group ready. Collective; blocks up to the timeout.
func Init(opts ...Option) (*PState, error) {
	params := capi.NewPstate_init_params_t()
	defer capi.DeletePstate_init_params_t(params)
	for _, o := range opts {
		o(params)
	}
	if d := Device(params.GetDevice()); !d.Valid() {
		return nil, invalid("Init", "WithDevice(Device(%d)): not a pstate.Device (%s)", int(d), deviceNames)
	}
	var h uintptr
	if err := capi.Init(params, &h); err != nil {
		return nil, wrap(err, "Init")
	}
	ps := &PState{h: h, flag: capi.NewInterruptFlag()}
	if ps.flag == 0 {
		_ = capi.Abort(h)
		return nil, &Error{Status: StatusNoMemory, Op: "Init", Detail: "no C memory for the interrupt flag"}
	}
	if err := capi.Set_interrupt_check(h, ps.flag); err != nil {
		_ = capi.Abort(h)
		capi.FreeInterruptFlag(ps.flag)
		return nil, wrap(err, "Init")
	}
	if err := ps.readSize(h); err != nil {
		_ = capi.Abort(h)
		capi.FreeInterruptFlag(ps.flag)
		return nil, wrap(err, "Init")
	}
	return ps, nil
}

// readSize sets ps.size from the world group (ps.mu held, or ps not shared yet).
func (ps *PState) readSize(h uintptr) error {
	var gh uintptr
	if err := capi.Get_group(h, int(World), &gh); err != nil {
		return err
	}
	info := capi.NewPstate_group_info_t()
	defer capi.DeletePstate_group_info_t(info)
	if err := capi.Group_info(gh, info); err != nil {
		return err
	}
	ps.size = info.GetWorld_size()
	return nil
}

// Interrupt stops the call that is blocked on ps now (another goroutine's Recv from a peer that
// never sends, a collective a peer never joins): it returns an error wrapping ErrInterrupted
// within ~100 ms. The call's peers were left inside the operation, so the PState is failed:
// later calls return ErrAborted; Abort it next. Interrupt may be called from any goroutine at
// any time, also while a call runs (it is the one method that does not wait for the call lock),
// e.g. from a signal.Notify loop:
//
//	sigs := make(chan os.Signal, 1)
//	signal.Notify(sigs, os.Interrupt)
//	go func() { <-sigs; ps.Interrupt() }()
//
// A call that never has to wait is not stopped; the interrupt stays raised for the next wait.
// After Close or Abort it does nothing.
func (ps *PState) Interrupt() {
	ps.flagMu.Lock()
	defer ps.flagMu.Unlock()
	if ps.flag != 0 {
		capi.RaiseInterruptFlag(ps.flag)
	}
}

// freeFlag releases the interrupt flag once the C context that read it is gone.
func (ps *PState) freeFlag() {
	ps.flagMu.Lock()
	defer ps.flagMu.Unlock()
	capi.FreeInterruptFlag(ps.flag)
	ps.flag = 0
}

// call runs fn on the live handle with the lock held.
func (ps *PState) call(op string, fn func(h uintptr) error) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.h == 0 {
		return badState(op, "the PState was closed or aborted; call pstate.Init again")
	}
	return wrap(fn(ps.h), op)
}

// take empties h for freeing (mu held).
func (ps *PState) take() uintptr {
	ps.hMu.Lock()
	defer ps.hMu.Unlock()
	h := ps.h
	ps.h = 0
	return h
}

// Close is pstate_finalize: graceful teardown that waits for peers (up to the timeout); closing
// twice is a no-op. It frees the state, also when it returns an error, except in the two cases
// pstate.h names, which free nothing and leave the PState usable: a graph capture still open
// (ErrInvalidState: End the Capture, then Close again; or Abort) and ErrBusy.
func (ps *PState) Close() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.h == 0 {
		return nil
	}
	err := capi.Finalize(ps.h)
	if st := statusOf(err); st == StatusBusy || (st == StatusInvalidState && ps.capturing) {
		return wrap(err, "Close") // nothing freed: the handle stays, for End, Close and Abort
	}
	ps.take()
	ps.capturing = false
	ps.freeFlag()
	ps.freeHooks()
	return wrap(err, "Close")
}

// statusOf is the status of the raw layer's error (StatusOK for nil).
func statusOf(err error) Status {
	var se *capi.StatusError
	if errors.As(err, &se) {
		return Status(se.Status)
	}
	if err != nil {
		return StatusInternal
	}
	return StatusOK
}

// Abort is pstate_abort: local teardown that never blocks on peers (after ErrPeerLost or
// ErrTimeout), from any goroutine. A watchdog goroutine stops the call another goroutine is
// blocked in (it returns an error wrapping ErrAborted within milliseconds: Revoke), then frees
// the state once that call has returned. Aborting a closed PState is a no-op.
func (ps *PState) Abort() error {
	if !ps.mu.TryLock() { // another goroutine is inside a call: stop it, then wait for it
		if err := ps.Revoke(); err != nil {
			return err
		}
		ps.mu.Lock()
	}
	defer ps.mu.Unlock()
	h := ps.take()
	if h == 0 {
		return nil
	}
	err := wrap(capi.Abort(h), "Abort")
	ps.capturing = false
	ps.freeFlag()
	ps.freeHooks()
	return err
}

// Revoke is pstate_revoke: stops the call in flight on ps from any goroutine, at any time (it
// returns an error wrapping ErrAborted within milliseconds, on shared memory, UCX, the store and
// NCCL's non-blocking calls), and every later call, freeing nothing: Abort (or Close) frees. It
// does not wait for the call lock. After Close or Abort it does nothing.
func (ps *PState) Revoke() error {
	ps.hMu.Lock()
	defer ps.hMu.Unlock()
	if ps.h == 0 {
		return nil
	}
	return wrap(capi.Revoke(ps.h), "Revoke")
}

// TraceDump is pstate_trace_dump: writes this rank's flight-recorder dump now (read by `pstate
// doctor`). path "": $PSTATE_TRACE_DIR/rank<R>.pstate-trace; a directory: that file in it; else
// the file itself. Dumps are also written on their own when a call fails with ErrTimeout,
// ErrPeerLost, ErrMismatch or ErrAborted, and when `pstate run` asks through the job's store.
// (SIGUSR1 dumps, PSTATE_TRACE_SIGNAL=1, need the signal's default action, which the Go runtime
// replaces: in Go programs call TraceDump, e.g. from a signal.Notify goroutine.)
func (ps *PState) TraceDump(path string) error {
	return ps.call("TraceDump", func(h uintptr) error { return capi.Trace_dump(h, path) })
}

// InitializeModelParallel cuts the world into SGLang's groups (collective over the world); zero
// sizes are the defaults (see ParallelConfig).
func (ps *PState) InitializeModelParallel(cfg ParallelConfig) error {
	if err := cfg.check("InitializeModelParallel"); err != nil {
		return err
	}
	c := cfg.toC()
	defer capi.DeletePstate_parallel_config_t(c)
	return ps.call("InitializeModelParallel", func(h uintptr) error { return capi.Initialize_model_parallel(h, c) })
}

// ModelParallelIsInitialized reports whether model-parallel groups exist.
func (ps *PState) ModelParallelIsInitialized() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.h != 0 && capi.Model_parallel_is_initialized(ps.h) != 0
}

// DestroyModelParallel drops the model-parallel groups (their *Group become invalid); the
// world group stays.
func (ps *PState) DestroyModelParallel() error {
	return ps.call("DestroyModelParallel", func(h uintptr) error {
		err := capi.Destroy_model_parallel(h)
		if err == nil {
			ps.gen++
		}
		return err
	})
}

// Group is the group of kind that contains this rank. World always exists; other kinds need
// InitializeModelParallel (ErrInvalidState), DCP and SharedExpertsTP only when configured
// (ErrUnsupported).
func (ps *PState) Group(kind GroupKind) (*Group, error) {
	if err := checkKind("Group("+kind.String()+")", kind); err != nil {
		return nil, err
	}
	var g *Group
	err := ps.call("Group("+kind.String()+")", func(h uintptr) error {
		var gh uintptr
		if err := capi.Get_group(h, int(kind), &gh); err != nil {
			return err
		}
		info := capi.NewPstate_group_info_t()
		defer capi.DeletePstate_group_info_t(info)
		if err := capi.Group_info(gh, info); err != nil {
			return err
		}
		g = &Group{ps: ps, h: gh, kind: kind, gen: ps.gen, info: GroupInfo{
			Kind: kind, Name: info.GetName(), Rank: info.GetRank(), RankInGroup: info.GetRank_in_group(),
			WorldSize: info.GetWorld_size(), LocalRank: info.GetLocal_rank(), FirstRank: info.GetFirst_rank(),
			LastRank: info.GetLast_rank(), NextRank: info.GetNext_rank(), PrevRank: info.GetPrev_rank(),
		}}
		return nil
	})
	return g, err
}

// World is the world group.
func (ps *PState) World() (*Group, error) { return ps.Group(World) }

// Rank is this rank's global rank (-1 when closed).
func (ps *PState) Rank() int {
	if w, err := ps.World(); err == nil {
		return w.info.Rank
	}
	return -1
}

// WorldSize is the number of ranks (0 when closed).
func (ps *PState) WorldSize() int {
	if w, err := ps.World(); err == nil {
		return w.info.WorldSize
	}
	return 0
}

// LiveRanks is pstate_live_ranks: the global ranks this rank does not know to be dead, ascending
// (a rank whose process ended, as the job's store, this host or a failed endpoint saw it, is
// dead). Local; works after an ErrPeerLost, to learn who is gone.
func (ps *PState) LiveRanks() ([]int, error) {
	var ranks []int32
	var count uint64
	if err := ps.call("LiveRanks", func(h uintptr) error {
		ranks = make([]int32, ps.size) // the world size is always enough
		return capi.Live_ranks(h, ranks, &count)
	}); err != nil {
		return nil, err
	}
	out := make([]int, count)
	for i := range out {
		out[i] = int(ranks[i])
	}
	return out, nil
}

// Shrink is pstate_shrink: collective over the survivors, after an ErrPeerLost (or ErrAborted
// because of one): every live rank calls it; they agree on who is alive and rebuild the world from
// them, ranks renumbered in their old order. It returns one entry per rank of the world before the
// call: that rank's new rank, -1 for a dead one. Every model-parallel and custom *Group is dropped,
// the world's too (get it again with World); call InitializeModelParallel again with sizes that
// fit the new world.
func (ps *PState) Shrink() ([]int, error) {
	var newRank []int32
	if err := ps.call("Shrink", func(h uintptr) error {
		newRank = make([]int32, ps.size) // the world before the call
		var n uint64                     // *count: that world's size
		err := capi.Shrink(h, newRank, &n)
		ps.gen++ // the groups are dropped first thing, whatever the outcome
		if err != nil {
			return err
		}
		return ps.readSize(h)
	}); err != nil {
		return nil, err
	}
	out := make([]int, len(newRank))
	for i, r := range newRank {
		out[i] = int(r)
	}
	return out, nil
}

// Grow is pstate_grow: collective over the world; admits the replacement processes waiting to join
// (started with PSTATE_REJOIN=1 and the RANK of a dead rank) and rebuilds the world with them
// appended. Every model-parallel and custom *Group is dropped, the world's too (get it again with
// World). Waits up to timeoutMs milliseconds for at least one; none in time: ErrTimeout, the world
// unchanged and usable.
func (ps *PState) Grow(timeoutMs int) error {
	if timeoutMs < 0 {
		return invalid("Grow", "timeoutMs %d is negative (int64_t milliseconds, 0 or more)", timeoutMs)
	}
	return ps.call("Grow", func(h uintptr) error {
		if err := capi.Grow(h, int64(timeoutMs)); err != nil {
			return err
		}
		ps.gen++
		return ps.readSize(h)
	})
}

// TPAllReduce is communication_op.py tensor_model_parallel_all_reduce: in place on the TP group.
// Arguments refused here fail the call on every rank of the TP group (Group.together).
func (ps *PState) TPAllReduce(buf Buffer, op ReduceOp, opts ...CallOption) error {
	o := collect(opts)
	err := firstError(
		func() error { return checkOp("TPAllReduce", op) },
		func() error { return buf.check("TPAllReduce", "buf", 0) })
	if err != nil {
		_ = ps.call("TPAllReduce", func(h uintptr) error { return capi.Tp_allreduce(h, nil, 1, refusedDType, int(Sum), 0) })
		return err
	}
	return ps.call("TPAllReduce", func(h uintptr) error {
		return capi.Tp_allreduce(h, buf.p, int64(buf.count), int(buf.dtype), int(op), o.stream)
	})
}

// TPAllGather is tensor_model_parallel_all_gather: recv = every TP rank's send, in rank order.
// Arguments refused here fail the call on every rank of the TP group (Group.together).
func (ps *PState) TPAllGather(send, recv Buffer, opts ...CallOption) error {
	tp, err := ps.Group(TP)
	if err != nil {
		return err
	}
	o := collect(opts)
	err = firstError(
		func() error { return sameDType("TPAllGather", send, recv) },
		func() error { return recv.check("TPAllGather", "recv", send.count*tp.info.WorldSize) })
	if err != nil {
		_ = ps.call("TPAllGather", func(h uintptr) error { return capi.Tp_allgather(h, nil, nil, 1, refusedDType, 0) })
		return err
	}
	return ps.call("TPAllGather", func(h uintptr) error {
		return capi.Tp_allgather(h, send.p, recv.p, int64(send.count), int(send.dtype), o.stream)
	})
}

// Capture is an open graph capture (SGLang's graph_capture()); End it when the graph is captured.
type Capture struct {
	ps     *PState
	stream uintptr
}

// Stream is the cudaStream_t to capture on.
func (c *Capture) Stream() uintptr { return c.stream }

// End leaves capture mode.
func (c *Capture) End() error {
	return c.ps.call("Capture.End", func(h uintptr) error {
		err := capi.Graph_capture_end(h)
		if err == nil {
			c.ps.capturing = false
		}
		return err
	})
}

// GraphCapture puts every group in capture mode (CUDA contexts only: ErrUnsupported on CPU).
// stream 0 lets pstate make a stream that waits on the context's stream.
//
//	c, err := ps.GraphCapture(0)
//	if err != nil { ... }
//	defer c.End()
func (ps *PState) GraphCapture(stream uintptr) (*Capture, error) {
	var captured uintptr // a plain word: cgo may not be handed a pointer into a struct holding Go pointers
	err := ps.call("GraphCapture", func(h uintptr) error {
		err := capi.Graph_capture_begin(h, stream, &captured)
		if err == nil {
			ps.capturing = true
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Capture{ps: ps, stream: captured}, nil
}

// ParallelConfig is pstate_parallel_config_t: SGLang's initialize_model_parallel sizes. A zero
// field is its default (pstate.h's rule, the same in C, `pstate layout`, Python and Rust):
// TensorParallel = world size / PipelineParallel, the others 1 (SharedExpertsTensorParallel: no
// group). So ParallelConfig{PipelineParallel: 2} on 4 ranks is TP 2 x PP 2, and the zero config
// is TP = world. Negative sizes are ErrInvalidArgument.
//
// Engine VLLM describes vLLM's layout instead (pstate.h, "vLLM's layout"): the world is
// ExternalDP x DataParallel x PipelineParallel x PrefillContextParallel x TensorParallel, with
// DecodeContextParallel blocks of each TP group, and MoEModel asks for its EP and EPLB groups;
// TensorParallel 0 is then world size / (DataParallel x PipelineParallel x PrefillContextParallel).
// SGLang's other sizes must stay 0 or 1 there, and DataParallel and PrefillContextParallel 0 or 1
// under SGLang.
type ParallelConfig struct {
	TensorParallel              int
	PipelineParallel            int
	ExpertParallel              int
	AttentionDataParallel       int
	AttentionContextParallel    int
	MoEDataParallel             int
	DecodeContextParallel       int
	SharedExpertsTensorParallel int
	Engine                      Engine // the zero value is SGLang
	DataParallel                int    // vLLM's data_parallel_size
	PrefillContextParallel      int    // vLLM's prefill_context_parallel_size
	MoEModel                    bool   // vLLM: a MoE model (EP and EPLB groups)
}

// check refuses sizes a C int cannot hold (they would arrive truncated).
func (c ParallelConfig) check(op string) error {
	if !c.Engine.Valid() {
		return invalid(op, "%v is not a pstate.Engine (SGLang, VLLM)", c.Engine)
	}
	for _, v := range []int{c.TensorParallel, c.PipelineParallel, c.ExpertParallel, c.AttentionDataParallel,
		c.AttentionContextParallel, c.MoEDataParallel, c.DecodeContextParallel, c.SharedExpertsTensorParallel,
		c.DataParallel, c.PrefillContextParallel} {
		if v != int(int32(v)) {
			return invalid(op, "parallel size %d does not fit a C int", v)
		}
	}
	return nil
}

// toC is the C struct (which the caller deletes) holding every field as it is: 0s are the
// library's defaults.
func (c ParallelConfig) toC() capi.Pstate_parallel_config_t {
	p := capi.NewPstate_parallel_config_t()
	p.SetTensor_parallel_size(c.TensorParallel)
	p.SetPipeline_parallel_size(c.PipelineParallel)
	p.SetExpert_parallel_size(c.ExpertParallel)
	p.SetAttention_data_parallel_size(c.AttentionDataParallel)
	p.SetAttention_context_parallel_size(c.AttentionContextParallel)
	p.SetMoe_data_parallel_size(c.MoEDataParallel)
	p.SetDecode_context_parallel_size(c.DecodeContextParallel)
	p.SetShared_experts_tensor_parallel_size(c.SharedExpertsTensorParallel)
	p.SetEngine(int(c.Engine))
	p.SetData_parallel_size(c.DataParallel)
	p.SetPrefill_context_parallel_size(c.PrefillContextParallel)
	moe := 0
	if c.MoEModel {
		moe = 1
	}
	p.SetMoe_model(moe)
	return p
}
