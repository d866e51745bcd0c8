//! pstate — the parallel state of an LLM serving runtime (SGLang's parallel_state.py as a C
//! library), safe Rust API over the bindgen-generated `pstate-sys`.
//!
//! ```no_run
//! use pstate::{GroupKind, InitOptions, ParallelConfig, PState, ReduceOp};
//! # fn main() -> pstate::Result<()> {
//! let mut ps = PState::init(&InitOptions::default())?; // RANK, WORLD_SIZE, ... from `pstate run`
//! ps.initialize_model_parallel(&ParallelConfig { tensor_parallel: 2, ..Default::default() })?;
//! let tp = ps.group(GroupKind::Tp)?;
//! let mut x = vec![1.0f32, 2.0, 3.0];
//! tp.all_reduce(&mut x, ReduceOp::Sum)?; // in place
//! drop(tp);
//! ps.finalize()
//! # }
//! ```
//!
//! Ownership mirrors the C lifetimes: a [`Group`] borrows its [`PState`], so it cannot outlive
//! it, and [`PState::destroy_model_parallel`] / [`PState::finalize`] (which invalidate groups in
//! C) need the PState exclusively or by value. Dropping a PState finalizes it (aborts it while
//! panicking). Non-blocking requests own their buffers or live in a [`scope`], so not even a
//! forgotten request lets the library write into memory Rust has freed ([`requests`] says why).
//! Thread rules are C's: a PState is `Send` (a rank may move to another thread) but
//! not `Sync`, and groups are neither, so one thread at a time drives a PState and its groups.
//! The compiler enforces all of this:
//!
//! ```compile_fail,E0277
//! // a Group cannot be sent to another thread
//! fn needs_send<T: Send>(_: T) {}
//! fn f(ps: &pstate::PState) { needs_send(ps.world().unwrap()); }
//! ```
//! ```compile_fail,E0277
//! // a PState cannot be shared between threads
//! fn needs_sync<T: Sync>(_: &T) {}
//! fn f(ps: &pstate::PState) { needs_sync(ps); }
//! ```
//! ```compile_fail,E0502
//! // destroy_model_parallel while a group is alive
//! fn f(mut ps: pstate::PState) {
//!     let tp = ps.group(pstate::GroupKind::Tp).unwrap();
//!     ps.destroy_model_parallel().unwrap();
//!     tp.barrier().unwrap();
//! }
//! ```
//! ```compile_fail,E0515
//! // a group outliving its PState
//! fn f(ps: pstate::PState) -> pstate::Group<'static> { ps.world().unwrap() }
//! ```
mod error;
mod hooks;
mod memory;
mod nonblocking;
pub mod requests;
mod rooted;
mod tensor_dict;
mod types;

pub use error::{Error, Result, Status};
pub use hooks::{CallInfo, HookId, HookPhase, Verdict};
pub use memory::{GroupMemory, MemInfo, MemKind, MemPath, MemStats};
pub use nonblocking::P2POp;
pub use requests::{scope, RecvBuf, Request, Scope, ScopedRequest, SendBuf};
pub use tensor_dict::Tensor;
pub use types::{Bf16, DType, Device, Element, Engine, GroupKind, ReduceOp, F16};

use error::check;
use pstate_sys as sys;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_int;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// pstate_version() of the loaded library: MAJOR*10000 + MINOR*100 + PATCH.
pub fn library_version() -> u32 {
    unsafe { sys::pstate_version() }
}

/// The C int of a rank argument; `op` names the call ("broadcast on tp:0", "Layout::group_of").
fn rank_arg(op: &str, what: &str, rank: usize) -> Result<i32> {
    i32::try_from(rank).map_err(|_| Error::new(Status::InvalidArgument, format!("{op}: {what} {rank} is not a rank (more than a C int holds)")))
}

/// An InitOptions string as a C string.
fn cstring(what: &str, s: &Option<String>) -> Result<Option<CString>> {
    s.as_ref()
        .map(|v| {
            CString::new(v.as_str())
                .map_err(|_| Error::new(Status::InvalidArgument, format!("PState::init: InitOptions::{what} contains a NUL byte")))
        })
        .transpose()
}

/// pstate_init_params_t. `None` fields come from the environment (what `pstate run` sets).
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    pub world_size: Option<usize>,
    pub rank: Option<usize>,
    pub local_rank: Option<usize>,
    /// "env://" (default), "tcp://HOST:PORT", "file:///PATH" or "etcd://HOST:PORT[,...]/PREFIX".
    pub init_method: Option<String>,
    pub device: Device,
    pub device_ordinal: Option<usize>,
    /// Every blocking call's deadline (default: PSTATE_TIMEOUT_MS or 10 minutes).
    pub timeout: Option<Duration>,
    pub job_token: Option<String>,
    pub socket_ifname: Option<String>,
}

/// pstate_parallel_config_t: SGLang's initialize_model_parallel sizes. A zero size is its default
/// (pstate.h's rule, the same in C, `pstate layout`, Python and Go): tensor_parallel = world size /
/// pipeline_parallel, the others 1 (shared_experts_tensor_parallel: no group). So
/// `ParallelConfig { pipeline_parallel: 2, ..Default::default() }` on 4 ranks is TP 2 x PP 2, and
/// the default config is TP = world.
///
/// `engine: Engine::Vllm` describes vLLM's layout instead (pstate.h, "vLLM's layout"): the world
/// is ExternalDP x data_parallel x pipeline_parallel x prefill_context_parallel x tensor_parallel,
/// decode_context_parallel cuts blocks of each TP group, and `moe_model` asks for its EP and EPLB
/// groups; tensor_parallel 0 is then world size / (data_parallel x pipeline_parallel x
/// prefill_context_parallel). SGLang's other sizes must stay 0 or 1 there, and data_parallel and
/// prefill_context_parallel 0 or 1 under SGLang.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParallelConfig {
    pub tensor_parallel: usize,
    pub pipeline_parallel: usize,
    pub expert_parallel: usize,
    pub attention_data_parallel: usize,
    pub attention_context_parallel: usize,
    pub moe_data_parallel: usize,
    pub decode_context_parallel: usize,
    pub shared_experts_tensor_parallel: usize,
    pub engine: Engine,
    /// vLLM's data_parallel_size.
    pub data_parallel: usize,
    /// vLLM's prefill_context_parallel_size.
    pub prefill_context_parallel: usize,
    /// vLLM: a MoE model (EP and EPLB groups).
    pub moe_model: bool,
}

impl ParallelConfig {
    /// The C struct holding every size as it is (0s are the library's defaults).
    fn to_c(self, op: &str) -> Result<Option<sys::pstate_parallel_config_t>> {
        let mut c = sys::pstate_parallel_config_init();
        c.engine = self.engine.raw();
        c.moe_model = i32::from(self.moe_model);
        let fields: [(&str, usize, &mut i32); 10] = [
            ("tensor_parallel", self.tensor_parallel, &mut c.tensor_parallel_size),
            ("pipeline_parallel", self.pipeline_parallel, &mut c.pipeline_parallel_size),
            ("expert_parallel", self.expert_parallel, &mut c.expert_parallel_size),
            ("attention_data_parallel", self.attention_data_parallel, &mut c.attention_data_parallel_size),
            ("attention_context_parallel", self.attention_context_parallel, &mut c.attention_context_parallel_size),
            ("moe_data_parallel", self.moe_data_parallel, &mut c.moe_data_parallel_size),
            ("decode_context_parallel", self.decode_context_parallel, &mut c.decode_context_parallel_size),
            ("shared_experts_tensor_parallel", self.shared_experts_tensor_parallel, &mut c.shared_experts_tensor_parallel_size),
            ("data_parallel", self.data_parallel, &mut c.data_parallel_size),
            ("prefill_context_parallel", self.prefill_context_parallel, &mut c.prefill_context_parallel_size),
        ];
        for (name, v, f) in fields {
            *f = i32::try_from(v).map_err(|_| {
                Error::new(Status::InvalidArgument, format!("{op}: ParallelConfig::{name} {v} is more than a C int holds"))
            })?;
        }
        Ok(Some(c))
    }
}

fn config_ptr(c: &Option<sys::pstate_parallel_config_t>) -> *const sys::pstate_parallel_config_t {
    c.as_ref().map_or(ptr::null(), |c| c as *const _)
}

/// One rank's parallel state (pstate_t).
pub struct PState {
    raw: NonNull<sys::pstate_t>,
    rank: usize,
    world_size: usize,
    /// Read by the C interrupt check (interrupt_check below); outlives the C context.
    interrupt: Arc<AtomicI32>,
    /// The handle AbortHandle revokes; None from the moment the C context is freed.
    revocable: Arc<Mutex<Option<RawContext>>>,
    /// add_hook's closures (their addresses are the C hooks' user values); dropped after the C
    /// context that calls them.
    hooks: std::cell::RefCell<Vec<(u64, Box<hooks::HookCell>)>>,
}

/// The C handle as an AbortHandle holds it (Send: pstate_revoke may be called from any thread).
#[derive(Debug)]
struct RawContext(NonNull<sys::pstate_t>);
// SAFETY: only pstate_revoke, which pstate.h allows from any thread while the context is
// allocated, is called through it, under the mutex that freeing the context takes first.
unsafe impl Send for RawContext {}

/// Stops the call in flight on its [`PState`] from another thread, as a serving runtime's
/// watchdog does (`pstate_revoke`, ncclCommAbort's role): the call returns `Status::Aborted`
/// within milliseconds, on shared memory, UCX, the store and NCCL's non-blocking calls, and
/// every later call on the PState returns `Status::Aborted` too. It frees nothing: the thread that
/// owns the PState sees the error and calls [`PState::abort`] (or drops it). Cloneable,
/// `Send + Sync`, usable after the PState is gone (then it does nothing).
#[derive(Debug, Clone)]
pub struct AbortHandle(Arc<Mutex<Option<RawContext>>>);

impl AbortHandle {
    pub fn abort(&self) -> Result<()> {
        let live = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match live.as_ref() {
            // SAFETY: the context is allocated while the mutex holds Some (freeing takes it first).
            Some(raw) => check(unsafe { sys::pstate_revoke(raw.0.as_ptr()) }),
            None => Ok(()),
        }
    }
}

/// Stops the call blocked on its [`PState`] from another thread: the call returns
/// `Status::Interrupted` within ~100 ms. The call's peers were left inside the operation, so the
/// PState is failed afterwards (later calls: `Status::Aborted`): [`PState::abort`] it next.
/// Cloneable, `Send + Sync`, usable after the PState is gone (then it does nothing); `interrupt`
/// is one atomic store, so a signal handler (e.g. Ctrl-C through the `ctrlc` crate) may call it.
/// A call that never has to wait is not stopped; the interrupt stays raised for the next wait.
#[derive(Debug, Clone)]
pub struct InterruptHandle(Arc<AtomicI32>);

impl InterruptHandle {
    pub fn interrupt(&self) {
        self.0.store(1, Ordering::Release);
    }
}

/// The C interrupt check of every PState: `user` is its `interrupt` flag.
extern "C" fn interrupt_check(user: *mut c_void) -> c_int {
    // SAFETY: user is Arc::as_ptr of the PState's flag, alive as long as the C context.
    unsafe { &*(user as *const AtomicI32) }.load(Ordering::Acquire)
}

// SAFETY: different pstate_t handles are independent and a handle may be driven from any thread,
// one at a time. PState is not Sync (raw pointer), so `&PState` (and every Group) stays on one
// thread.
unsafe impl Send for PState {}

impl PState {
    /// init_distributed_environment: rendezvous with the other ranks; the world group is ready
    /// when it returns. Collective; blocks up to the timeout.
    pub fn init(opts: &InitOptions) -> Result<PState> {
        let mut p = sys::pstate_init_params_init();
        let int = |what: &str, v: Option<usize>| -> Result<i32> {
            v.map_or(Ok(-1), |v| {
                i32::try_from(v).map_err(|_| {
                    Error::new(Status::InvalidArgument, format!("PState::init: InitOptions::{what} {v} is more than a C int holds"))
                })
            })
        };
        p.world_size = int("world_size", opts.world_size)?;
        p.rank = int("rank", opts.rank)?;
        p.local_rank = int("local_rank", opts.local_rank)?;
        p.device_ordinal = int("device_ordinal", opts.device_ordinal)?;
        p.device = sys::pstate_device_t(opts.device as u32);
        if let Some(t) = opts.timeout {
            p.timeout_ms = i64::try_from(t.as_millis()).unwrap_or(i64::MAX).max(1);
        }
        let init_method = cstring("init_method", &opts.init_method)?;
        let job_token = cstring("job_token", &opts.job_token)?;
        let ifname = cstring("socket_ifname", &opts.socket_ifname)?;
        p.init_method = init_method.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        p.job_token = job_token.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        p.socket_ifname = ifname.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut out = ptr::null_mut();
        check(unsafe { sys::pstate_init(&p, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::new(Status::Internal, "PState::init: the library returned no context (please report this)"))?;
        let mut ps = PState {
            raw,
            rank: 0,
            world_size: 0,
            interrupt: Arc::new(AtomicI32::new(0)),
            revocable: Arc::new(Mutex::new(Some(RawContext(raw)))),
            hooks: Default::default(),
        };
        let flag = Arc::as_ptr(&ps.interrupt) as *mut c_void;
        check(unsafe { sys::pstate_set_interrupt_check(ps.as_raw(), Some(interrupt_check), flag) })?; // (Drop finalizes on error)
        let info = ps.world()?.info().clone();
        (ps.rank, ps.world_size) = (info.rank, info.world_size);
        Ok(ps)
    }

    /// This rank's global rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks in the world.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// pstate_live_ranks: the global ranks this rank does not know to be dead, ascending (a rank
    /// whose process ended, as the job's store, this host or a failed endpoint saw it, is dead).
    /// Local; works after a `Status::PeerLost` error, to learn who is gone.
    pub fn live_ranks(&self) -> Result<Vec<usize>> {
        let mut ranks = vec![0i32; self.world_size];
        let mut n = 0usize;
        check(unsafe { sys::pstate_live_ranks(self.as_raw(), ranks.as_mut_ptr(), ranks.len(), &mut n) })?;
        Ok(ranks[..n].iter().map(|&r| r as usize).collect())
    }

    /// pstate_shrink: collective over the survivors, after a `Status::PeerLost` error (or
    /// `Status::Aborted` because of one): every live rank calls it; they agree on who is alive and
    /// rebuild the world from them, ranks renumbered in their old order. Returns one entry per rank
    /// of the world before the call: its new rank, -1 for a dead one. Every model-parallel and
    /// custom group is dropped, the world's too (no Group may be alive: they borrow the PState);
    /// call `initialize_model_parallel` again with sizes that fit the new world.
    pub fn shrink(&mut self) -> Result<Vec<i32>> {
        let mut new_rank = vec![-1i32; self.world_size]; // the world before the call
        let mut n = 0usize; // *count: that world's size
        check(unsafe { sys::pstate_shrink(self.as_raw(), new_rank.as_mut_ptr(), new_rank.len(), &mut n) })?;
        self.reread_world()?;
        new_rank.truncate(n);
        Ok(new_rank)
    }

    /// pstate_grow: collective over the world; admits the replacement processes waiting to join
    /// (started with PSTATE_REJOIN=1 and the RANK of a dead rank) and rebuilds the world with them
    /// appended. Every model-parallel and custom group is dropped, the world's too (no Group may be
    /// alive: they borrow the PState). Waits up to timeout_ms for at least one; none in time:
    /// `Status::Timeout`, the world unchanged and usable.
    pub fn grow(&mut self, timeout_ms: i64) -> Result<()> {
        check(unsafe { sys::pstate_grow(self.as_raw(), timeout_ms) })?;
        self.reread_world()
    }

    /// The rank and world size kept here, after the world was rebuilt.
    fn reread_world(&mut self) -> Result<()> {
        let info = self.world()?.info().clone();
        (self.rank, self.world_size) = (info.rank, info.world_size);
        Ok(())
    }

    /// A handle that stops the call blocked on this PState from another thread (see
    /// [`InterruptHandle`]).
    pub fn interrupt_handle(&self) -> InterruptHandle {
        InterruptHandle(Arc::clone(&self.interrupt))
    }

    /// A handle that stops the call in flight on this PState from another thread (see
    /// [`AbortHandle`]).
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(Arc::clone(&self.revocable))
    }

    /// The C context is about to be freed: AbortHandle must not reach it from now on.
    fn retire(&self) {
        *self.revocable.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The raw handle, for calls this crate does not wrap.
    pub fn as_raw(&self) -> *mut sys::pstate_t {
        self.raw.as_ptr()
    }

    /// Cuts the world into SGLang's groups (collective over the world).
    pub fn initialize_model_parallel(&mut self, cfg: &ParallelConfig) -> Result<()> {
        let c = cfg.to_c("PState::initialize_model_parallel")?;
        check(unsafe { sys::pstate_initialize_model_parallel(self.as_raw(), config_ptr(&c)) })
    }

    pub fn model_parallel_is_initialized(&self) -> bool {
        unsafe { sys::pstate_model_parallel_is_initialized(self.as_raw()) != 0 }
    }

    /// Drops the model-parallel groups (no Group may be alive: they borrow the PState).
    pub fn destroy_model_parallel(&mut self) -> Result<()> {
        check(unsafe { sys::pstate_destroy_model_parallel(self.as_raw()) })
    }

    /// Writes this rank's flight-recorder dump now (`pstate_trace_dump`, read by `pstate doctor`):
    /// `None` = `$PSTATE_TRACE_DIR/rank<R>.pstate-trace`, a directory = that file in it, else the
    /// file itself. Dumps are also written on their own when a call fails with `Timeout`,
    /// `PeerLost`, `Mismatch` or `Aborted`, when `pstate run` asks through the job's store, and on
    /// SIGUSR1 when the process was started with `PSTATE_TRACE_SIGNAL=1`.
    pub fn trace_dump(&self, path: Option<&str>) -> Result<()> {
        let path = path
            .map(|p| CString::new(p).map_err(|_| Error::new(Status::InvalidArgument, "PState::trace_dump: path contains a NUL byte")))
            .transpose()?;
        check(unsafe { sys::pstate_trace_dump(self.as_raw(), path.as_ref().map_or(ptr::null(), |p| p.as_ptr())) })
    }

    /// The group of kind containing this rank. [`GroupKind::Custom`] is refused
    /// (`Status::InvalidArgument`): a custom group is the [`Group`] [`PState::new_group`]
    /// returned; keep it.
    pub fn group(&self, kind: GroupKind) -> Result<Group<'_>> {
        if kind == GroupKind::Custom {
            return Err(Error::new(
                Status::InvalidArgument,
                "PState::group: GroupKind::Custom is not a kind of the layout: a custom group is the Group that \
                 PState::new_group returned (keep it; its name is custom:<n>); the layout's kinds are GroupKind::ALL",
            ));
        }
        let mut g = ptr::null_mut();
        check(unsafe { sys::pstate_get_group(self.as_raw(), kind.raw(), &mut g) })?;
        let raw = NonNull::new(g).ok_or_else(|| Error::new(Status::Internal, "PState::group: the library returned no group (please report this)"))?;
        let mut info = sys::pstate_group_info_init();
        check(unsafe { sys::pstate_group_info(raw.as_ptr(), &mut info) })?;
        Ok(Group { raw, info: GroupInfo::from_c(kind, &info), _ps: PhantomData })
    }

    /// The world group.
    pub fn world(&self) -> Result<Group<'_>> {
        self.group(GroupKind::World)
    }

    /// tensor_model_parallel_all_reduce: in place on the TP group.
    pub fn tp_all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        check(unsafe {
            sys::pstate_tp_allreduce(self.as_raw(), buf.as_mut_ptr().cast(), buf.len(), T::DTYPE.raw(), op.raw(), ptr::null_mut())
        })
    }

    /// tensor_model_parallel_all_gather: recv (tp size * send.len()) = every TP rank's send.
    pub fn tp_all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let tp = self.group(GroupKind::Tp)?;
        if let Err(e) = need("PState::tp_all_gather", "recv", recv.len(), send.len() * tp.world_size()) {
            // the others are inside the call: they fail with this rank (Group::together)
            let _ = unsafe { sys::pstate_tp_allgather(self.as_raw(), ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ptr::null_mut()) };
            return Err(e);
        }
        check(unsafe {
            sys::pstate_tp_allgather(self.as_raw(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), send.len(), T::DTYPE.raw(), ptr::null_mut())
        })
    }

    /// SGLang's graph_capture(): every group in capture mode until the guard is dropped (or
    /// ended). CUDA contexts only (Status::Unsupported on CPU). stream null: pstate makes one.
    pub fn graph_capture(&self, stream: *mut c_void) -> Result<GraphCapture<'_>> {
        let mut capture_stream = ptr::null_mut();
        check(unsafe { sys::pstate_graph_capture_begin(self.as_raw(), stream, &mut capture_stream) })?;
        Ok(GraphCapture { ps: self, stream: capture_stream, ended: false })
    }

    /// pstate_add_hook: `hook` is called before and after every call of this PState's groups
    /// (from the next one on, in the order hooks were added), told what the call is and how it
    /// ended, and once when the PState fails or is aborted ([`HookPhase::Abort`], possibly on an
    /// [`AbortHandle`]'s thread). [`Verdict::Refuse`] in [`HookPhase::Before`] refuses the call
    /// (`Status::InvalidArgument`, on every rank for a collective of a CPU group). A hook must
    /// not call this PState (the call it hooks holds it: `Status::Busy`) and should be quick; a
    /// panic in it is caught and the call goes on. docs/hooks.md.
    pub fn add_hook<F>(&self, hook: F) -> Result<HookId>
    where
        F: FnMut(&CallInfo<'_>) -> Verdict + Send + 'static,
    {
        let cell: Box<hooks::HookCell> = Box::new(Mutex::new(Box::new(hook)));
        let user = &*cell as *const hooks::HookCell as *mut c_void;
        let mut id = 0u64;
        check(unsafe { sys::pstate_add_hook(self.as_raw(), Some(hooks::trampoline), user, &mut id) })?;
        self.hooks.borrow_mut().push((id, cell));
        Ok(HookId(id))
    }

    /// pstate_remove_hook: the hook sees no call after this one (`Status::InvalidArgument` for an
    /// id this PState does not have).
    pub fn remove_hook(&self, id: HookId) -> Result<()> {
        check(unsafe { sys::pstate_remove_hook(self.as_raw(), id.0) })?;
        self.hooks.borrow_mut().retain(|(i, _)| *i != id.0);
        Ok(())
    }

    /// Graceful teardown (waits for peers up to the timeout); always frees the state.
    pub fn finalize(self) -> Result<()> {
        let me = ManuallyDrop::new(self);
        me.retire();
        let result = check(unsafe { sys::pstate_finalize(me.raw.as_ptr()) });
        // SAFETY: me is never used again; the flag goes after the C context that read it.
        drop(unsafe { ptr::read(&me.interrupt) });
        drop(unsafe { ptr::read(&me.revocable) });
        drop(unsafe { ptr::read(&me.hooks) });
        result
    }

    /// Local teardown that never blocks on peers (after PeerLost / Timeout / Interrupted).
    pub fn abort(self) -> Result<()> {
        let me = ManuallyDrop::new(self);
        me.retire();
        let result = check(unsafe { sys::pstate_abort(me.raw.as_ptr()) });
        // SAFETY: as in finalize.
        drop(unsafe { ptr::read(&me.interrupt) });
        drop(unsafe { ptr::read(&me.revocable) });
        drop(unsafe { ptr::read(&me.hooks) });
        result
    }
}

impl Drop for PState {
    /// Finalizes; aborts instead while the thread is panicking (peers may be gone).
    fn drop(&mut self) {
        self.retire();
        unsafe {
            if std::thread::panicking() {
                sys::pstate_abort(self.raw.as_ptr());
            } else {
                sys::pstate_finalize(self.raw.as_ptr());
            }
        }
    }
}

/// An open graph capture; leaves capture mode when dropped.
pub struct GraphCapture<'ps> {
    ps: &'ps PState,
    stream: *mut c_void,
    ended: bool,
}

impl GraphCapture<'_> {
    /// The cudaStream_t to capture on.
    pub fn stream(&self) -> *mut c_void {
        self.stream
    }

    /// Leaves capture mode, reporting its error (Drop ignores it).
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        check(unsafe { sys::pstate_graph_capture_end(self.ps.as_raw()) })
    }
}

impl Drop for GraphCapture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            unsafe { sys::pstate_graph_capture_end(self.ps.as_raw()) };
        }
    }
}

/// pstate_group_info_t: SGLang's GroupCoordinator properties as seen from this rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    pub kind: GroupKind,
    /// `"<kind>:<index among its kind>"`, e.g. `"tp:0"`
    pub name: String,
    pub rank: usize,
    pub rank_in_group: usize,
    pub world_size: usize,
    pub local_rank: usize,
    pub first_rank: usize,
    pub last_rank: usize,
    pub next_rank: usize,
    pub prev_rank: usize,
}

impl GroupInfo {
    fn from_c(kind: GroupKind, c: &sys::pstate_group_info_t) -> GroupInfo {
        let u = |v: i32| usize::try_from(v).unwrap_or(usize::MAX);
        let name = unsafe { CStr::from_ptr(c.name.as_ptr()) }.to_string_lossy().into_owned();
        GroupInfo {
            kind,
            name,
            rank: u(c.rank),
            rank_in_group: u(c.rank_in_group),
            world_size: u(c.world_size),
            local_rank: u(c.local_rank),
            first_rank: u(c.first_rank),
            last_rank: u(c.last_rank),
            next_rank: u(c.next_rank),
            prev_rank: u(c.prev_rank),
        }
    }
}

/// The dtype of a collective's refused form (Group::together).
pub(crate) const REFUSED_DTYPE: sys::pstate_dtype_t = sys::pstate_dtype_t::PSTATE_INT8;

/// A buffer of at least `want` elements; `op` names the call ("all_gather on tp:0").
fn need(op: &str, name: &str, have: usize, want: usize) -> Result<()> {
    if have < want {
        return Err(Error::new(Status::InvalidArgument, format!("{op}: {name} holds {have} elements, {want} needed")));
    }
    Ok(())
}

/// Bytes an object call returned; freed with pstate_bytes_free.
struct Bytes(sys::pstate_bytes_t);

impl Bytes {
    fn new() -> Bytes {
        Bytes(sys::pstate_bytes_t { data: ptr::null_mut(), size: 0 })
    }
    fn as_slice(&self) -> &[u8] {
        if self.0.data.is_null() {
            return &[];
        }
        unsafe { std::slice::from_raw_parts(self.0.data as *const u8, self.0.size) }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        unsafe { sys::pstate_bytes_free(&mut self.0) };
    }
}

/// One group of a PState; ranks passed to its operations are ranks in the group.
pub struct Group<'ps> {
    raw: NonNull<sys::pstate_group_t>,
    info: GroupInfo,
    _ps: PhantomData<&'ps PState>,
}

impl<'ps> Group<'ps> {
    pub(crate) fn g(&self) -> *mut sys::pstate_group_t {
        self.raw.as_ptr()
    }

    /// `"<method> on <group name>"`, how this crate's messages name a call on the group.
    pub(crate) fn op(&self, method: &str) -> String {
        format!("{method} on {}", self.name())
    }

    /// rank_arg for a call on this group.
    pub(crate) fn rank_of(&self, method: &str, what: &str, rank: usize) -> Result<i32> {
        rank_arg(&self.op(method), what, rank)
    }

    /// need for a call on this group.
    pub(crate) fn need(&self, method: &str, name: &str, have: usize, want: usize) -> Result<()> {
        if have < want {
            return need(&self.op(method), name, have, want);
        }
        Ok(())
    }

    /// `checked`, the result of a collective's argument checks, after taking part in the call
    /// when they refused it: `refuse` is the C call in its refused form (null buffers of one
    /// element, [`REFUSED_DTYPE`]), which C refuses on this rank inside the call's agreement, so
    /// every rank of the group fails at once (`Status::InvalidArgument` naming this rank there)
    /// and none pairs the call with this rank's next one. Most checks see what only this rank
    /// sees (its buffers, a root's recv or send): a rank that returned alone would leave the
    /// others inside the call, and they would return another call's data without an error
    /// (issue 46).
    pub(crate) fn together<R>(&self, checked: Result<R>, refuse: impl FnOnce(*mut sys::pstate_group_t) -> sys::pstate_status_t) -> Result<R> {
        if checked.is_err() {
            let _ = refuse(self.g()); // C refuses it; this crate's error says more
        }
        checked
    }

    pub fn info(&self) -> &GroupInfo {
        &self.info
    }
    pub fn kind(&self) -> GroupKind {
        self.info.kind
    }
    pub fn name(&self) -> &str {
        &self.info.name
    }
    pub fn rank_in_group(&self) -> usize {
        self.info.rank_in_group
    }
    pub fn world_size(&self) -> usize {
        self.info.world_size
    }

    /// Global ranks of the group in group order.
    pub fn ranks(&self) -> Result<Vec<usize>> {
        let mut ranks = vec![0i32; self.world_size()];
        let mut n = 0usize;
        check(unsafe { sys::pstate_group_ranks(self.g(), ranks.as_mut_ptr(), ranks.len(), &mut n) })?;
        Ok(ranks[..n].iter().map(|&r| r as usize).collect())
    }

    /// SGLang's in_the_same_node_as: whether each group rank shares a host with `source`
    /// (pstate_group_same_node's root).
    pub fn same_node(&self, source: usize) -> Result<Vec<bool>> {
        let mut flags = vec![0i32; self.world_size()];
        let mut n = 0usize;
        check(unsafe { sys::pstate_group_same_node(self.g(), self.rank_of("same_node", "source", source)?, flags.as_mut_ptr(), flags.len(), &mut n) })?;
        Ok(flags[..n].iter().map(|&f| f != 0).collect())
    }

    /// Bounds every later call of this group on this rank by `timeout` instead of the context's
    /// timeout (`None`: the context's again); a call past it returns `Status::Timeout` naming the
    /// group's timeout and fails the context as any timeout does. Local, not collective: set it
    /// alike on every rank (pstate_group_set_timeout; docs/timeouts.md).
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        let ms = match timeout {
            None => 0,
            Some(d) => i64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX).max(1),
        };
        check(unsafe { sys::pstate_group_set_timeout(self.g(), ms) })
    }

    /// The timeout of this group's calls on this rank: its own (`set_timeout`) or the context's.
    pub fn timeout(&self) -> Result<std::time::Duration> {
        let mut ms = 0i64;
        check(unsafe { sys::pstate_group_timeout(self.g(), &mut ms) })?;
        Ok(std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    /// `buf[i]` = op over the group of `buf[i]`, in place.
    pub fn all_reduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let p = buf.as_mut_ptr();
        check(unsafe { sys::pstate_all_reduce(self.g(), p.cast(), p.cast(), buf.len(), T::DTYPE.raw(), op.raw(), ptr::null_mut()) })
    }

    /// `recv[i]` = op over the group of `send[i]`.
    pub fn all_reduce_into<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        self.together(self.need("all_reduce_into", "recv", recv.len(), send.len()), |g| unsafe {
            sys::pstate_all_reduce(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ReduceOp::Sum.raw(), ptr::null_mut())
        })?;
        check(unsafe {
            sys::pstate_all_reduce(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), send.len(), T::DTYPE.raw(), op.raw(), ptr::null_mut())
        })
    }

    /// recv (world_size * send.len()) = every rank's send in group-rank order.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.together(self.need("all_gather", "recv", recv.len(), send.len() * self.world_size()), |g| unsafe {
            sys::pstate_all_gather(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ptr::null_mut())
        })?;
        check(unsafe {
            sys::pstate_all_gather(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), send.len(), T::DTYPE.raw(), ptr::null_mut())
        })
    }

    /// send holds world_size blocks of recv.len(); this rank receives block rank_in_group of
    /// their reduction.
    pub fn reduce_scatter<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        self.together(self.need("reduce_scatter", "send", send.len(), recv.len() * self.world_size()), |g| unsafe {
            sys::pstate_reduce_scatter(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ReduceOp::Sum.raw(), ptr::null_mut())
        })?;
        check(unsafe {
            sys::pstate_reduce_scatter(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), recv.len(), T::DTYPE.raw(), op.raw(), ptr::null_mut())
        })
    }

    /// buf of group rank src copied into buf on every rank.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()> {
        let src_i = self.together(self.rank_of("broadcast", "src", src), |g| unsafe {
            sys::pstate_broadcast(g, ptr::null_mut(), 1, REFUSED_DTYPE, 0, ptr::null_mut())
        })?;
        check(unsafe { sys::pstate_broadcast(self.g(), buf.as_mut_ptr().cast(), buf.len(), T::DTYPE.raw(), src_i, ptr::null_mut()) })
    }

    /// On group rank dst, recv (world_size * send.len()) = every rank's send in rank order;
    /// recv must be Some there and is ignored elsewhere. A recv dst refuses fails the call on
    /// every rank of the group at once (`Group::together`).
    pub fn gather<T: Element>(&self, send: &[T], recv: Option<&mut [T]>, dst: usize) -> Result<()> {
        let checked = (|| {
            let dst_i = self.rank_of("gather", "dst", dst)?;
            let recv_ptr: *mut c_void = match recv {
                Some(r) if self.rank_in_group() == dst => {
                    self.need("gather", "recv", r.len(), send.len() * self.world_size())?;
                    r.as_mut_ptr().cast()
                }
                Some(_) => ptr::null_mut(), // ignored off dst: never written
                None if self.rank_in_group() == dst => {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("{}: recv is None on dst (group rank {dst}), which needs Some of {} elements", self.op("gather"), send.len() * self.world_size()),
                    ))
                }
                None => ptr::null_mut(),
            };
            Ok((dst_i, recv_ptr))
        })();
        let (dst_i, recv_ptr) = self.together(checked, |g| unsafe {
            sys::pstate_gather(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, 0, ptr::null_mut())
        })?;
        check(unsafe { sys::pstate_gather(self.g(), send.as_ptr().cast(), recv_ptr, send.len(), T::DTYPE.raw(), dst_i, ptr::null_mut()) })
    }

    /// Block j of send goes to group rank j; block i of recv came from rank i.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let n = self.world_size().max(1);
        let checked = if send.len() % n != 0 {
            Err(Error::new(Status::InvalidArgument, format!("{}: send holds {} elements, not a multiple of the group size {n}", self.op("all_to_all"), send.len())))
        } else {
            self.need("all_to_all", "recv", recv.len(), send.len())
        };
        self.together(checked, |g| unsafe { sys::pstate_all_to_all(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ptr::null_mut()) })?;
        check(unsafe {
            sys::pstate_all_to_all(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), send.len() / n, T::DTYPE.raw(), ptr::null_mut())
        })
    }

    /// Sends buf to group rank dst.
    pub fn send<T: Element>(&self, buf: &[T], dst: usize) -> Result<()> {
        check(unsafe { sys::pstate_send(self.g(), buf.as_ptr().cast(), buf.len(), T::DTYPE.raw(), self.rank_of("send", "dst", dst)?, ptr::null_mut()) })
    }

    /// Receives exactly buf.len() elements from group rank src.
    pub fn recv<T: Element>(&self, buf: &mut [T], src: usize) -> Result<()> {
        check(unsafe { sys::pstate_recv(self.g(), buf.as_mut_ptr().cast(), buf.len(), T::DTYPE.raw(), self.rank_of("recv", "src", src)?, ptr::null_mut()) })
    }

    /// Returns once every rank of the group has entered it.
    pub fn barrier(&self) -> Result<()> {
        check(unsafe { sys::pstate_barrier(self.g()) })
    }

    /// data of group rank src on every rank (other ranks' data is ignored).
    pub fn broadcast_object(&self, data: &[u8], src: usize) -> Result<Vec<u8>> {
        let mut out = Bytes::new();
        check(unsafe { sys::pstate_broadcast_object(self.g(), data.as_ptr().cast(), data.len(), self.rank_of("broadcast_object", "src", src)?, &mut out.0) })?;
        Ok(out.as_slice().to_vec())
    }

    /// Every rank's data, in group-rank order.
    pub fn all_gather_object(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Bytes::new();
        let mut sizes = vec![0usize; self.world_size()];
        let mut n = 0usize;
        check(unsafe { sys::pstate_all_gather_object(self.g(), data.as_ptr().cast(), data.len(), &mut out.0, sizes.as_mut_ptr(), sizes.len(), &mut n) })?;
        let all = out.as_slice();
        let mut off = 0;
        Ok(sizes[..n]
            .iter()
            .map(|&s| {
                let part = all[off..off + s].to_vec();
                off += s;
                part
            })
            .collect())
    }

    /// Sends data to group rank dst; the receiver learns the size.
    pub fn send_object(&self, data: &[u8], dst: usize) -> Result<()> {
        check(unsafe { sys::pstate_send_object(self.g(), data.as_ptr().cast(), data.len(), self.rank_of("send_object", "dst", dst)?) })
    }

    /// The next object sent by group rank src.
    pub fn recv_object(&self, src: usize) -> Result<Vec<u8>> {
        let mut out = Bytes::new();
        check(unsafe { sys::pstate_recv_object(self.g(), self.rank_of("recv_object", "src", src)?, &mut out.0) })?;
        Ok(out.as_slice().to_vec())
    }

    /// all_reduce on device memory (CUDA contexts), enqueued on stream (null: the context's).
    ///
    /// # Safety
    /// send and recv must be device allocations of at least count elements of dtype that stay
    /// valid until the operation completes on stream.
    pub unsafe fn all_reduce_device(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: *mut c_void,
    ) -> Result<()> {
        check(sys::pstate_all_reduce(self.g(), send, recv, count, dtype.raw(), op.raw(), stream))
    }
}

/// SGLang's rank layout for a world, computed locally (no communication). Thread-safe.
pub struct Layout {
    raw: NonNull<sys::pstate_layout_t>,
    world_size: usize,
}

// SAFETY: the layout functions are thread-safe (pstate.h: functions without a pstate_t handle).
unsafe impl Send for Layout {}
unsafe impl Sync for Layout {}

impl Layout {
    /// The groups SGLang's initialize_model_parallel builds for world_size ranks.
    pub fn new(world_size: usize, cfg: &ParallelConfig) -> Result<Layout> {
        let world = i32::try_from(world_size).map_err(|_| {
            Error::new(Status::InvalidArgument, format!("Layout::new: world_size {world_size} is more than a C int holds"))
        })?;
        let c = cfg.to_c("Layout::new")?;
        let mut out = ptr::null_mut();
        check(unsafe { sys::pstate_layout_create(world, config_ptr(&c), &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::new(Status::Internal, "Layout::new: the library returned no layout (please report this)"))?;
        Ok(Layout { raw, world_size })
    }

    /// Number of groups of kind (0 when the layout has none).
    pub fn group_count(&self, kind: GroupKind) -> Result<usize> {
        let mut n = 0;
        check(unsafe { sys::pstate_layout_group_count(self.raw.as_ptr(), kind.raw(), &mut n) })?;
        Ok(n)
    }

    /// Global ranks of group index of kind, ascending.
    pub fn group_ranks(&self, kind: GroupKind, index: usize) -> Result<Vec<usize>> {
        let mut ranks = vec![0i32; self.world_size];
        let mut n = 0;
        check(unsafe { sys::pstate_layout_group_ranks(self.raw.as_ptr(), kind.raw(), index, ranks.as_mut_ptr(), ranks.len(), &mut n) })?;
        Ok(ranks[..n].iter().map(|&r| r as usize).collect())
    }

    /// Index of the group of kind containing global rank.
    pub fn group_of(&self, kind: GroupKind, rank: usize) -> Result<usize> {
        let mut idx = 0;
        check(unsafe { sys::pstate_layout_group_of(self.raw.as_ptr(), kind.raw(), rank_arg("Layout::group_of", "rank", rank)?, &mut idx) })?;
        Ok(idx)
    }

    /// Every group of kind, in SGLang's order.
    pub fn groups(&self, kind: GroupKind) -> Result<Vec<Vec<usize>>> {
        (0..self.group_count(kind)?).map(|i| self.group_ranks(kind, i)).collect()
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        unsafe { sys::pstate_layout_destroy(self.raw.as_ptr()) };
    }
}
