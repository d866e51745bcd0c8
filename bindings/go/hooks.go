// hooks.go — hooks around every call (pstate_add_hook, docs/hooks.md): a Go func that pstate calls
// before and after each call of the PState's groups, with what the call is and how it ended, and
// once when the PState fails or is aborted. A hook's error in HookBefore refuses the call.
package pstate

import (
	"runtime/cgo"
	"sync"
	"time"

	"pstate.dev/pstate/internal/capi"
)

// HookPhase says when a hook is called (pstate_hook_phase_t).
type HookPhase int

const (
	HookBefore HookPhase = 0 // the call is about to begin (after its argument checks)
	HookAfter  HookPhase = 1 // it returned: Status, Duration and Message are set
	HookAbort  HookPhase = 2 // the PState failed, was revoked or aborted (once per PState)
)

// CallInfo is what a hook is told (pstate_call_info_t).
type CallInfo struct {
	Phase     HookPhase
	Status    Status // HookAfter: what the call returns; HookAbort: the failure's
	CallID    uint64 // the PState's calls numbered from 1; HookBefore and HookAfter of one call share it
	Group     string // "tp:0"; "" in HookAbort
	Operation string // "all_reduce", "send", ...; in HookAbort "context_failed", "pstate_revoke" or "pstate_abort"
	Seq       uint64 // the group's number of a CPU collective; ^uint64(0) otherwise
	Count     uint64 // the call's count (elements; bytes for objects)
	DType     DType  // -1 where the call has none (objects, barrier)
	Root      int    // group rank of a rooted call, else -1
	Peer      int    // group rank of the other side of a point-to-point call, else -1
	OnDevice  bool   // the buffers are device memory
	Bytes     uint64 // Count times the dtype's size
	Path      string // "shm", "ucx", "nccl", "local" or "none"
	Duration  time.Duration
	Send      uintptr // the data this rank sends (HookBefore/HookAfter), 0 where none
	SendBytes uint64
	Message   string // HookAfter of a failed call and HookAbort: the error's text
}

// Hook is called on the goroutine that makes the call (HookAbort: that of the call that failed
// the PState, or of Revoke/Abort, which may be another one, also while a hook runs for a call).
// In HookBefore a non-nil error refuses the call: it returns ErrInvalidArgument without moving
// data, on every rank for a collective of a CPU group. A hook must not call methods of its PState
// (they wait for the call lock the hooked call holds) and should return quickly.
type Hook func(info *CallInfo) error

// HookID names a hook for RemoveHook.
type HookID uint64

type hookSet struct {
	mu      sync.Mutex
	handles map[HookID]cgo.Handle
}

// AddHook registers h for every call of ps's groups from the next one on (pstate_add_hook);
// hooks run in the order they were added.
func (ps *PState) AddHook(h Hook) (HookID, error) {
	if h == nil {
		return 0, invalid("AddHook", "the hook is nil")
	}
	fn := capi.HookFunc(func(c *capi.CallInfo) int {
		info := CallInfo{Phase: HookPhase(c.Phase), Status: Status(c.Status), CallID: c.CallID, Group: c.Group,
			Operation: c.Operation, Seq: c.Seq, Count: c.Count, DType: DType(c.Dtype), Root: c.Root, Peer: c.Peer,
			OnDevice: c.OnDevice, Bytes: c.Bytes, Path: c.Path, Duration: time.Duration(c.DurationNs),
			Send: c.Send, SendBytes: c.SendBytes, Message: c.Message}
		if err := h(&info); err != nil && info.Phase == HookBefore {
			return int(StatusInvalidArgument)
		}
		return 0
	})
	handle := cgo.NewHandle(fn)
	var id uint64
	err := ps.call("AddHook", func(hd uintptr) error { return capi.AddHook(hd, uintptr(handle), &id) })
	if err != nil {
		handle.Delete()
		return 0, err
	}
	ps.hooks.mu.Lock()
	defer ps.hooks.mu.Unlock()
	if ps.hooks.handles == nil {
		ps.hooks.handles = map[HookID]cgo.Handle{}
	}
	ps.hooks.handles[HookID(id)] = handle
	return HookID(id), nil
}

// RemoveHook unregisters a hook (pstate_remove_hook); ErrInvalidArgument for an unknown id.
func (ps *PState) RemoveHook(id HookID) error {
	if err := ps.call("RemoveHook", func(hd uintptr) error { return capi.Remove_hook(hd, uint64(id)) }); err != nil {
		return err
	}
	ps.hooks.mu.Lock()
	defer ps.hooks.mu.Unlock()
	if handle, ok := ps.hooks.handles[id]; ok {
		handle.Delete()
		delete(ps.hooks.handles, id)
	}
	return nil
}

// freeHooks releases every hook's handle once the C context that called them is gone.
func (ps *PState) freeHooks() {
	ps.hooks.mu.Lock()
	defer ps.hooks.mu.Unlock()
	for id, handle := range ps.hooks.handles {
		handle.Delete()
		delete(ps.hooks.handles, id)
	}
}
