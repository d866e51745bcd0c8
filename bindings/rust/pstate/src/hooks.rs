//! Hooks around every call (`pstate_add_hook`, docs/hooks.md): a closure that pstate calls before
//! and after each call of a [`PState`](crate::PState)'s groups, told what the call is and how it
//! ended, and once when the PState fails or is aborted. Returning [`Verdict::Refuse`] in
//! [`HookPhase::Before`] refuses the call.
use crate::error::Status;
use crate::types::DType;
use pstate_sys as sys;
use std::ffi::{c_void, CStr};
use std::os::raw::c_char;
use std::sync::Mutex;
use std::time::Duration;

/// When a hook is called (`pstate_hook_phase_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPhase {
    /// The call is about to begin (after its argument checks).
    Before,
    /// It returned: `status`, `duration` and `message` are set.
    After,
    /// The PState failed, was revoked or aborted (once per PState).
    Abort,
}

/// What a hook says in [`HookPhase::Before`] (ignored in the other phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the call go on.
    Go,
    /// Refuse it: it returns `Status::InvalidArgument` without moving data (on every rank, for a
    /// collective of a CPU group).
    Refuse,
}

/// What a hook is told (`pstate_call_info_t`), borrowed for the hook's call.
#[derive(Debug, Clone)]
pub struct CallInfo<'a> {
    pub phase: HookPhase,
    /// After: what the call returns (None: success); Abort: the failure's.
    pub status: Option<Status>,
    /// The PState's calls numbered from 1; Before and After of one call share it (0 in Abort).
    pub call_id: u64,
    /// "tp:0"; "" in Abort.
    pub group: &'a str,
    /// "all_reduce", "send", ...; in Abort "context_failed", "pstate_revoke" or "pstate_abort".
    pub operation: &'a str,
    /// The group's number of a CPU collective; None otherwise.
    pub seq: Option<u64>,
    /// The call's count (elements; bytes for objects).
    pub count: u64,
    /// None where the call has none (objects, barrier).
    pub dtype: Option<DType>,
    pub root: Option<usize>,
    pub peer: Option<usize>,
    pub on_device: bool,
    pub bytes: u64,
    /// "shm", "ucx", "nccl", "local" or "none".
    pub path: &'a str,
    pub duration: Duration,
    /// The data this rank sends (Before/After) as an address and a length, where the call has any.
    pub send: Option<(*const c_void, u64)>,
    /// After of a failed call and Abort: the error's text.
    pub message: Option<&'a str>,
}

/// A hook's id, for [`PState::remove_hook`](crate::PState::remove_hook).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HookId(pub(crate) u64);

/// The closure as the C hook's user value points at it. Behind a mutex: Abort may come from a
/// watchdog thread (an AbortHandle) while the PState's thread runs the same hook for a call.
pub(crate) type HookCell = Mutex<Box<dyn FnMut(&CallInfo<'_>) -> Verdict + Send>>;

unsafe fn text<'a>(p: *const c_char) -> &'a str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("")
    }
}

fn rank(v: i32) -> Option<usize> {
    usize::try_from(v).ok()
}

/// The C hook of every Rust hook: `user` is its HookCell.
pub(crate) extern "C" fn trampoline(user: *mut c_void, info: *const sys::pstate_call_info_t) -> sys::pstate_status_t {
    let ok = sys::pstate_status_t(0);
    // SAFETY: user is the HookCell that PState keeps boxed while the hook is registered; info is
    // valid during the call, its strings too.
    let (cell, i) = unsafe { (&*(user as *const HookCell), &*info) };
    let phase = match i.phase.0 {
        0 => HookPhase::Before,
        1 => HookPhase::After,
        _ => HookPhase::Abort,
    };
    let call = unsafe {
        CallInfo {
            phase,
            status: Status::from_raw(i.status.0),
            call_id: i.call_id,
            group: text(i.group),
            operation: text(i.operation),
            seq: (i.seq != u64::MAX).then_some(i.seq),
            count: i.count,
            dtype: if i.dtype >= 0 { DType::from_raw(sys::pstate_dtype_t(i.dtype as u32)) } else { None },
            root: rank(i.root),
            peer: rank(i.peer),
            on_device: i.on_device != 0,
            bytes: i.bytes,
            path: text(i.path),
            duration: Duration::from_nanos(u64::try_from(i.duration_ns).unwrap_or(0)),
            send: (!i.send.is_null()).then_some((i.send, i.send_bytes)),
            message: (!i.message.is_null()).then(|| text(i.message)),
        }
    };
    // A panic must not unwind into C: it is caught and the call goes on (its message printed by
    // the panic hook as usual).
    let verdict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut f = cell.lock().unwrap_or_else(|e| e.into_inner());
        f(&call)
    }))
    .unwrap_or(Verdict::Go);
    if phase == HookPhase::Before && verdict == Verdict::Refuse {
        sys::pstate_status_t(Status::InvalidArgument.raw())
    } else {
        ok
    }
}
