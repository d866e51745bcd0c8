// memory.go — group memory and registered buffers (issue 29): pstate_mem_alloc/free/pool_reserve,
// pstate_mem_register/deregister, pstate_mem_query, pstate_group_mem_stats and
// pstate_set_graph_registration, CUDA contexts only (a CPU context answers ErrUnsupported).
//
// A *DeviceMemory owns its allocation: Close frees it (a pool piece locally, a collective
// allocation collectively: every rank of the group closes its memory of the same MemAlloc at the
// same point). No finalizer frees it: the garbage collector runs at different moments on
// different ranks, and a collective call that ranks do not make together would hang; memory not
// closed is freed with its group (DestroyModelParallel, Close, Abort of the PState).
package pstate

import "pstate.dev/pstate/internal/capi"

// MemPath says which memory path a device collective took (MemStats.LastPath).
type MemPath int

// The paths of pstate_mem_path_t.
const (
	MemPathNone       MemPath = 0
	MemPathPlain      MemPath = 1
	MemPathRegistered MemPath = 2
	MemPathSymmetric  MemPath = 3
)

// MemKind says what holds a pointer (MemInfo.Kind).
type MemKind int

// The kinds of pstate_mem_kind_t.
const (
	MemNone       MemKind = 0
	MemGroup      MemKind = 1
	MemPool       MemKind = 2
	MemRegistered MemKind = 3
)

// DeviceMemory is group memory of a CUDA context: Ptr is a device address of the context's device.
type DeviceMemory struct {
	g      *Group
	Ptr    uintptr
	Bytes  uint64
	Pooled bool
}

// MemAlloc is pstate_mem_alloc: collective over the group (ErrMismatch when ranks disagree about
// bytes) unless the group has a pool (MemPoolReserve), then local.
func (g *Group) MemAlloc(bytes uint64) (*DeviceMemory, error) {
	var p uintptr
	err := g.call("MemAlloc", func(h uintptr) error { return capi.Mem_alloc(h, int64(bytes), &p) })
	if err != nil {
		return nil, err
	}
	info, err := g.MemQuery(p)
	if err != nil {
		return nil, err
	}
	return &DeviceMemory{g: g, Ptr: p, Bytes: bytes, Pooled: info.Kind == MemPool}, nil
}

// Close frees the memory (pstate_mem_free); a second Close does nothing.
func (m *DeviceMemory) Close() error {
	if m == nil || m.Ptr == 0 {
		return nil
	}
	p := m.Ptr
	m.Ptr = 0
	return m.g.call("DeviceMemory.Close", func(h uintptr) error { return capi.Mem_free(h, p) })
}

// MemPoolReserve is pstate_mem_pool_reserve: collective, once per group.
func (g *Group) MemPoolReserve(bytes uint64) error {
	return g.call("MemPoolReserve", func(h uintptr) error { return capi.Mem_pool_reserve(h, int64(bytes)) })
}

// MemRegister is pstate_mem_register: registers a device buffer of yours (local).
func (g *Group) MemRegister(ptr uintptr, bytes uint64) error {
	return g.call("MemRegister", func(h uintptr) error {
		return capi.Mem_register(h, ptr, int64(bytes))
	})
}

// MemDeregister drops one registration made at ptr.
func (g *Group) MemDeregister(ptr uintptr) error {
	return g.call("MemDeregister", func(h uintptr) error {
		return capi.Mem_deregister(h, ptr)
	})
}

// MemInfo is pstate_mem_info_t.
type MemInfo struct {
	Kind       MemKind
	Base       uintptr
	Size       uint64
	Symmetric  bool
	Registered bool
}

// MemQuery is pstate_mem_query.
func (g *Group) MemQuery(ptr uintptr) (MemInfo, error) {
	info := capi.NewPstate_mem_info_t()
	defer capi.DeletePstate_mem_info_t(info)
	err := g.call("MemQuery", func(h uintptr) error { return capi.Mem_query(h, ptr, info) })
	if err != nil {
		return MemInfo{}, err
	}
	return MemInfo{Kind: MemKind(info.GetKind()), Base: uintptr(info.GetBase()), Size: uint64(info.GetSize()),
		Symmetric: info.GetSymmetric() != 0, Registered: info.GetRegistered() != 0}, nil
}

// MemStats is pstate_mem_stats_t.
type MemStats struct {
	SymmetricCalls, RegisteredCalls, PlainCalls uint64
	Windows, Registrations                      uint64
	Allocated, PoolReserved, PoolUsed           uint64
	SymmetricAvailable                          bool
	LastPath                                    MemPath
	NCCLVersion                                 int
}

// MemStats is pstate_group_mem_stats.
func (g *Group) MemStats() (MemStats, error) {
	st := capi.NewPstate_mem_stats_t()
	defer capi.DeletePstate_mem_stats_t(st)
	err := g.call("MemStats", func(h uintptr) error { return capi.Group_mem_stats(h, st) })
	if err != nil {
		return MemStats{}, err
	}
	return MemStats{SymmetricCalls: st.GetSymmetric_calls(), RegisteredCalls: st.GetRegistered_calls(),
		PlainCalls: st.GetPlain_calls(), Windows: uint64(st.GetWindows()), Registrations: uint64(st.GetRegistrations()),
		Allocated: uint64(st.GetAllocated()), PoolReserved: uint64(st.GetPool_reserved()), PoolUsed: uint64(st.GetPool_used()),
		SymmetricAvailable: st.GetSymmetric_available() != 0, LastPath: MemPath(st.GetLast_path()),
		NCCLVersion: st.GetNccl_version()}, nil
}

// SetGraphRegistration is pstate_set_graph_registration: register captured buffers at capture end.
func (ps *PState) SetGraphRegistration(enable bool) error {
	v := 0
	if enable {
		v = 1
	}
	return ps.call("SetGraphRegistration", func(h uintptr) error { return capi.Set_graph_registration(h, v) })
}
