//! Group memory and registered buffers of a [`Group`] (issue 29): `pstate_mem_alloc`,
//! `pstate_mem_free`, `pstate_mem_pool_reserve`, `pstate_mem_register` / `deregister`,
//! `pstate_mem_query`, `pstate_group_mem_stats`, and [`PState::set_graph_registration`]. CUDA
//! contexts only (a CPU context answers [`Status::Unsupported`](crate::Status::Unsupported)).
//!
//! A [`GroupMemory`] owns its allocation and borrows its group, so it cannot outlive the group
//! (nor, through the group, its [`PState`]): dropping it frees it. A piece of the group's pool is
//! freed locally; a collective allocation collectively, so in SPMD code every rank drops it at the
//! same point (its scope's end); [`GroupMemory::free`] does the same and reports the status.
use crate::error::{check, Result};
use crate::{sys, Group, PState};
use std::ffi::c_void;
use std::ptr;

/// Which memory path a device collective took (`pstate_mem_path_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemPath {
    None,
    Plain,
    Registered,
    Symmetric,
}

/// What holds a pointer (`pstate_mem_kind_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    None,
    Group,
    Pool,
    Registered,
}

/// `pstate_mem_info_t`.
#[derive(Clone, Copy, Debug)]
pub struct MemInfo {
    pub kind: MemKind,
    pub base: *mut c_void,
    pub size: usize,
    pub symmetric: bool,
    pub registered: bool,
}

/// `pstate_mem_stats_t`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemStats {
    pub symmetric_calls: u64,
    pub registered_calls: u64,
    pub plain_calls: u64,
    pub windows: usize,
    pub registrations: usize,
    pub allocated: usize,
    pub pool_reserved: usize,
    pub pool_used: usize,
    pub symmetric_available: bool,
    pub last_path: Option<MemPath>,
    pub nccl_version: i32,
}

/// Group memory: `len()` bytes of device memory at `as_ptr()` (a device address of the group's
/// CUDA context), freed on drop.
pub struct GroupMemory<'g, 'ps> {
    group: &'g Group<'ps>,
    ptr: *mut c_void,
    bytes: usize,
    pooled: bool,
}

impl GroupMemory<'_, '_> {
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    /// Whether it is a piece of the group's pool (freed locally) rather than a collective allocation.
    pub fn pooled(&self) -> bool {
        self.pooled
    }
    /// Frees now and reports the status (drop frees too, ignoring it).
    pub fn free(mut self) -> Result<()> {
        let p = std::mem::replace(&mut self.ptr, ptr::null_mut());
        check(unsafe { sys::pstate_mem_free(self.group.g(), p) })
    }
}

impl Drop for GroupMemory<'_, '_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            let _ = unsafe { sys::pstate_mem_free(self.group.g(), self.ptr) };
        }
    }
}

fn path_of(raw: sys::pstate_mem_path_t) -> Option<MemPath> {
    match raw {
        sys::pstate_mem_path_t::PSTATE_MEM_PATH_PLAIN => Some(MemPath::Plain),
        sys::pstate_mem_path_t::PSTATE_MEM_PATH_REGISTERED => Some(MemPath::Registered),
        sys::pstate_mem_path_t::PSTATE_MEM_PATH_SYMMETRIC => Some(MemPath::Symmetric),
        _ => None,
    }
}

impl<'ps> Group<'ps> {
    /// `pstate_mem_alloc`: collective over the group (MISMATCH when ranks disagree about bytes)
    /// unless it has a pool ([`Group::mem_pool_reserve`]), then local.
    pub fn mem_alloc(&self, bytes: usize) -> Result<GroupMemory<'_, 'ps>> {
        let mut p = ptr::null_mut();
        check(unsafe { sys::pstate_mem_alloc(self.g(), bytes, &mut p) })?;
        let mut memory = GroupMemory { group: self, ptr: p, bytes, pooled: false };
        memory.pooled = self.mem_query(p)?.kind == MemKind::Pool;
        Ok(memory)
    }

    /// `pstate_mem_pool_reserve`: collective, once per group.
    pub fn mem_pool_reserve(&self, bytes: usize) -> Result<()> {
        check(unsafe { sys::pstate_mem_pool_reserve(self.g(), bytes) })
    }

    /// `pstate_mem_register`: registers a device buffer of yours with the group's communicator.
    /// # Safety
    /// `ptr` must be device memory of the context's device, allocated while registered.
    pub unsafe fn mem_register(&self, ptr: *mut c_void, bytes: usize) -> Result<()> {
        check(sys::pstate_mem_register(self.g(), ptr, bytes))
    }

    /// `pstate_mem_deregister`.
    pub fn mem_deregister(&self, ptr: *mut c_void) -> Result<()> {
        check(unsafe { sys::pstate_mem_deregister(self.g(), ptr) })
    }

    /// `pstate_mem_query`.
    pub fn mem_query(&self, ptr: *const c_void) -> Result<MemInfo> {
        let mut info = sys::pstate_mem_info_t {
            struct_size: std::mem::size_of::<sys::pstate_mem_info_t>(),
            base: ptr::null_mut(),
            size: 0,
            kind: sys::pstate_mem_kind_t::PSTATE_MEM_NONE,
            symmetric: 0,
            registered: 0,
            reserved0: 0,
        };
        check(unsafe { sys::pstate_mem_query(self.g(), ptr, &mut info) })?;
        let kind = match info.kind {
            sys::pstate_mem_kind_t::PSTATE_MEM_GROUP => MemKind::Group,
            sys::pstate_mem_kind_t::PSTATE_MEM_POOL => MemKind::Pool,
            sys::pstate_mem_kind_t::PSTATE_MEM_REGISTERED => MemKind::Registered,
            _ => MemKind::None,
        };
        Ok(MemInfo { kind, base: info.base, size: info.size, symmetric: info.symmetric != 0, registered: info.registered != 0 })
    }

    /// `pstate_group_mem_stats`.
    pub fn mem_stats(&self) -> Result<MemStats> {
        // SAFETY: a plain C struct; every field is valid zeroed, struct_size set below.
        let mut st: sys::pstate_mem_stats_t = unsafe { std::mem::zeroed() };
        st.struct_size = std::mem::size_of::<sys::pstate_mem_stats_t>();
        check(unsafe { sys::pstate_group_mem_stats(self.g(), &mut st) })?;
        Ok(MemStats {
            symmetric_calls: st.symmetric_calls,
            registered_calls: st.registered_calls,
            plain_calls: st.plain_calls,
            windows: st.windows,
            registrations: st.registrations,
            allocated: st.allocated,
            pool_reserved: st.pool_reserved,
            pool_used: st.pool_used,
            symmetric_available: st.symmetric_available != 0,
            last_path: path_of(st.last_path),
            nccl_version: st.nccl_version,
        })
    }
}

impl PState {
    /// `pstate_set_graph_registration`: register the buffers of captured device collectives at
    /// the end of each graph capture.
    pub fn set_graph_registration(&self, enable: bool) -> Result<()> {
        check(unsafe { sys::pstate_set_graph_registration(self.as_raw(), enable as i32) })
    }
}
