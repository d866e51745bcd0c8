// hooks.go — the Go side of pstate_add_hook: pstateGoHook is the C hook's way into Go (pstate.i's
// pstate_go_hook calls it with the runtime/cgo Handle AddHook registered as the hook's user
// value), and CallInfo is pstate_call_info_t copied into Go memory. Hand-written (regenerate.sh
// writes only capi.go and capi_wrap.c); an exported function needs a file whose preamble
// declares, never defines, C functions.
package capi

// #include <stdint.h>
// #include <pstate/pstate.h>
import "C"

import "runtime/cgo"

// CallInfo is what a hook is told (pstate_call_info_t; strings copied, Send an address).
type CallInfo struct {
	Phase      int
	Status     int
	CallID     uint64
	Group      string
	Operation  string
	Seq        uint64
	Count      uint64
	Dtype      int
	Root       int
	Peer       int
	OnDevice   bool
	Bytes      uint64
	Path       string
	DurationNs int64
	Send       uintptr
	SendBytes  uint64
	Message    string
}

// HookFunc is the Go func behind a hook's Handle: it returns a status (nonzero in BEFORE refuses).
type HookFunc func(info *CallInfo) int

//export pstateGoHook
func pstateGoHook(handle C.uintptr_t, info *C.pstate_call_info_t) C.int {
	fn, ok := cgo.Handle(handle).Value().(HookFunc)
	if !ok {
		return 0
	}
	ci := CallInfo{
		Phase:      int(info.phase),
		Status:     int(info.status),
		CallID:     uint64(info.call_id),
		Group:      C.GoString(info.group),
		Operation:  C.GoString(info.operation),
		Seq:        uint64(info.seq),
		Count:      uint64(info.count),
		Dtype:      int(info.dtype),
		Root:       int(info.root),
		Peer:       int(info.peer),
		OnDevice:   info.on_device != 0,
		Bytes:      uint64(info.bytes),
		Path:       C.GoString(info.path),
		DurationNs: int64(info.duration_ns),
		Send:       uintptr(info.send),
		SendBytes:  uint64(info.send_bytes),
	}
	if info.message != nil {
		ci.Message = C.GoString(info.message)
	}
	return C.int(fn(&ci))
}
