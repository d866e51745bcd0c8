//! Variable-count collectives (`pstate_all_gatherv`, `pstate_reduce_scatterv`), non-blocking
//! point-to-point (`pstate_isend`/`pstate_irecv` + `pstate_wait`/`pstate_test`), batched
//! point-to-point (`pstate_p2p_batch`), custom groups (`pstate_new_group`) and sliced tensor dicts
//! (`pstate_send/recv_tensor_dict_sliced`).
//!
//! A [`Request`] borrows its buffer for as long as it is pending (`Request<'a>` holds the
//! `&'a [T]` of an isend or the `&'a mut [T]` of an irecv), so the borrow checker refuses to
//! read a pending receive buffer or to change a pending send buffer:
//!
//! ```compile_fail,E0502
//! fn f(w: &pstate::Group<'_>) {
//!     let mut buf = vec![0f32; 4];
//!     let req = w.irecv(&mut buf, 1).unwrap();
//!     println!("{}", buf[0]); // still owned by the pending receive
//!     req.wait().unwrap();
//! }
//! ```
//! ```compile_fail,E0506
//! fn f(w: &pstate::Group<'_>) {
//!     let mut buf = [1f32; 4];
//!     let req = w.isend(&buf, 1).unwrap();
//!     buf[0] = 2.0; // the pending send still reads it
//!     req.wait().unwrap();
//! }
//! ```
//! ```compile_fail,E0505
//! // a request borrows its group, hence the PState: no finalize while it is pending
//! fn f(ps: pstate::PState, buf: &mut [f32]) {
//!     let w = ps.world().unwrap();
//!     let req = w.irecv(buf, 1).unwrap();
//!     ps.finalize().unwrap();
//!     req.wait().unwrap();
//! }
//! ```
//! ```compile_fail,E0277
//! // a request is driven by the thread of its PState (C: one thread at a time per context)
//! fn needs_send<T: Send>(_: T) {}
//! fn f(w: &pstate::Group<'_>, buf: &mut [f32]) { needs_send(w.irecv(buf, 1).unwrap()); }
//! ```
//!
//! Once `wait` returned (it consumes the request), the buffer is the caller's again:
//!
//! ```no_run
//! # fn f(w: &pstate::Group<'_>) -> pstate::Result<()> {
//! let mut buf = vec![0f32; 4];
//! let req = w.irecv(&mut buf, 1)?;
//! req.wait()?;
//! println!("{}", buf[0]);
//! # Ok(()) }
//! ```
use crate::error::{check, Error, Result, Status};
use crate::types::{Element, GroupKind, ReduceOp};
use crate::{rank_arg, sys, Group, GroupInfo, PState};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// One pending isend/irecv (SGLang's P2PWork), borrowing its buffer until it completes.
///
/// Complete it with [`Request::wait`] (consumes it) or [`Request::test`] until it returns
/// `Ok(true)` (or an error: the operation failed, and the request is complete). Dropping a
/// request that has not completed waits for it (at most the context timeout) and ignores its
/// error, so the buffer is never released to the caller while pstate still uses it. It also
/// borrows its group (hence the PState), so while it is pending the PState cannot be finalized,
/// moved to another thread, or have its groups destroyed (which C refuses for a pending
/// request). Not `Send`: it is driven by the thread that drives its PState.
#[must_use = "a request must be completed (wait or test); dropping it waits"]
pub struct Request<'a> {
    raw: *mut sys::pstate_request_t, // null once completed
    _buf: PhantomData<&'a mut [u8]>,
}

impl Request<'_> {
    /// Waits until the request completes (at most the context timeout) and returns its result:
    /// `Status::Mismatch` for a message of another size, `Timeout`, `PeerLost`, `Aborted` after
    /// finalize/abort.
    pub fn wait(mut self) -> Result<()> {
        self.complete()
    }

    fn complete(&mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        if raw.is_null() {
            return Ok(());
        }
        check(unsafe { sys::pstate_wait(raw) })
    }

    /// Progresses the transfer once without blocking: `Ok(true)` when the request completed
    /// (then `wait` returns `Ok(())` at once), `Ok(false)` while it is pending, the operation's
    /// error when it completed with one.
    pub fn test(&mut self) -> Result<bool> {
        if self.raw.is_null() {
            return Ok(true);
        }
        let mut done = 0;
        let status = unsafe { sys::pstate_test(self.raw, &mut done) };
        if done != 0 {
            self.raw = ptr::null_mut(); // freed by the library
            check(status)?;
            return Ok(true);
        }
        check(status).map(|()| false)
    }

    /// Whether the request completed (through `test`).
    pub fn is_done(&self) -> bool {
        self.raw.is_null()
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        let _ = self.complete();
    }
}

/// One send or receive of [`Group::p2p_batch`], borrowing its buffer.
pub struct P2POp<'a> {
    raw: sys::pstate_p2p_op_t,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> P2POp<'a> {
    fn new(is_send: bool, buf: *mut std::ffi::c_void, count: usize, dtype: sys::pstate_dtype_t, peer: usize) -> Result<P2POp<'a>> {
        let mut raw = sys::pstate_p2p_op_init();
        raw.is_send = is_send as i32;
        raw.buf = buf;
        raw.count = count;
        raw.dtype = dtype;
        raw.peer = rank_arg("peer", peer)?;
        Ok(P2POp { raw, _buf: PhantomData })
    }

    /// Sends `buf` to group rank `peer`.
    pub fn send<T: Element>(buf: &'a [T], peer: usize) -> Result<P2POp<'a>> {
        P2POp::new(true, buf.as_ptr() as *mut _, buf.len(), T::DTYPE.raw(), peer)
    }

    /// Receives exactly `buf.len()` elements from group rank `peer` into `buf`.
    pub fn recv<T: Element>(buf: &'a mut [T], peer: usize) -> Result<P2POp<'a>> {
        P2POp::new(false, buf.as_mut_ptr().cast(), buf.len(), T::DTYPE.raw(), peer)
    }
}

fn counts_arg(g: &Group<'_>, what: &str, counts: &[usize]) -> Result<usize> {
    if counts.len() != g.world_size() {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("{what} on {}: counts has {} entries, the group has {} ranks (one count per group rank)", g.name(), counts.len(), g.world_size()),
        ));
    }
    counts
        .iter()
        .try_fold(0usize, |a, &c| a.checked_add(c))
        .ok_or_else(|| Error::new(Status::InvalidArgument, format!("{what} on {}: the sum of counts overflows", g.name())))
}

impl<'ps> Group<'ps> {
    /// SGLang's all_gatherv with sizes: `counts[i]` is group rank i's element count (the same on
    /// every rank); `send` holds `counts[rank_in_group]` elements; `recv` (at least sum(counts))
    /// receives every rank's part packed in group-rank order.
    pub fn all_gatherv<T: Element>(&self, send: &[T], recv: &mut [T], counts: &[usize]) -> Result<()> {
        let total = counts_arg(self, "all_gatherv", counts)?;
        let mine = counts[self.rank_in_group()];
        if send.len() != mine {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("all_gatherv on {}: send holds {} elements but counts[{}] (this rank) is {mine}", self.name(), send.len(), self.rank_in_group()),
            ));
        }
        crate::need("recv", recv.len(), total)?;
        check(unsafe {
            sys::pstate_all_gatherv(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), counts.as_ptr(), T::DTYPE.raw(), ptr::null_mut())
        })
    }

    /// SGLang's reduce_scatterv with sizes: `send` holds sum(counts) elements; group rank i
    /// receives in `recv` (at least `counts[i]`) the reduction of the `counts[i]` elements at
    /// offset `counts[0] + ... + counts[i-1]`.
    pub fn reduce_scatterv<T: Element>(&self, send: &[T], recv: &mut [T], counts: &[usize], op: ReduceOp) -> Result<()> {
        let total = counts_arg(self, "reduce_scatterv", counts)?;
        if send.len() != total {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("reduce_scatterv on {}: send holds {} elements but sum(counts) is {total}", self.name(), send.len()),
            ));
        }
        crate::need("recv", recv.len(), counts[self.rank_in_group()])?;
        check(unsafe {
            sys::pstate_reduce_scatterv(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), counts.as_ptr(), T::DTYPE.raw(), op.raw(), ptr::null_mut())
        })
    }

    /// Posts a send of `buf` to group rank `dst` and returns at once; `buf` (and the group)
    /// stay borrowed until the request completes.
    pub fn isend<'a, T: Element>(&'a self, buf: &'a [T], dst: usize) -> Result<Request<'a>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::pstate_isend(self.g(), buf.as_ptr().cast(), buf.len(), T::DTYPE.raw(), rank_arg("dst", dst)?, ptr::null_mut(), &mut raw) })?;
        Ok(Request { raw, _buf: PhantomData })
    }

    /// Posts a receive of exactly `buf.len()` elements from group rank `src` and returns at
    /// once; `buf` stays (mutably) borrowed, and the group borrowed, until the request
    /// completes.
    pub fn irecv<'a, T: Element>(&'a self, buf: &'a mut [T], src: usize) -> Result<Request<'a>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::pstate_irecv(self.g(), buf.as_mut_ptr().cast(), buf.len(), T::DTYPE.raw(), rank_arg("src", src)?, ptr::null_mut(), &mut raw) })?;
        Ok(Request { raw, _buf: PhantomData })
    }

    /// torch's batch_isend_irecv, completed: every op runs as one batch (any listing order, no
    /// deadlock); returns when all are done. Sends to one peer match that peer's receives from
    /// this rank in list order.
    pub fn p2p_batch(&self, ops: &[P2POp<'_>]) -> Result<()> {
        // P2POp is a pstate_p2p_op_t plus a zero-sized marker: pass the structs.
        let raw: Vec<sys::pstate_p2p_op_t> = ops.iter().map(|o| o.raw).collect();
        check(unsafe { sys::pstate_p2p_batch(self.g(), raw.as_ptr(), raw.len(), ptr::null_mut()) })
    }

    fn ag(&self, ag: &Group<'_>) -> *mut sys::pstate_group_t {
        ag.g()
    }

    /// send_tensor_dict with all_gather_group `ag` (SGLang): a tensor whose element count
    /// divides by ag's size S > 1 goes as this rank's 1/S slice; the receiver gathers it whole
    /// over its own ag ([`Group::recv_tensor_dict_sliced`]).
    pub fn send_tensor_dict_sliced(&self, tensors: &[crate::Tensor], dst: usize, ag: &Group<'ps>) -> Result<()> {
        let dst = rank_arg("dst", dst)?;
        let a = self.ag(ag);
        self.send_dict(tensors, |dict| unsafe { sys::pstate_send_tensor_dict_sliced(self.g(), dict.ptr(), dict.len(), dst, a, ptr::null_mut()) })
    }

    /// The next dict sent with [`Group::send_tensor_dict_sliced`] by group rank `src`;
    /// collective over `ag` (every rank of ag calls it, each from its own sender). Every tensor
    /// arrives whole.
    pub fn recv_tensor_dict_sliced(&self, src: usize, ag: &Group<'ps>) -> Result<Vec<crate::Tensor>> {
        let src = rank_arg("src", src)?;
        let a = self.ag(ag);
        self.receive_dict(|alloc, user| unsafe { sys::pstate_recv_tensor_dict_sliced(self.g(), src, a, alloc, user, ptr::null_mut()) })
    }
}

impl PState {
    /// SGLang's create_custom_parallel_group (vLLM's new_group): collective over the world,
    /// every rank passing the global ranks of the group it joins (strictly ascending, itself
    /// among them) or `&[]` to join none (`Ok(None)`). The group's kind is
    /// [`GroupKind::Custom`], its name "custom:<n>"; [`PState::destroy_model_parallel`] retires
    /// it (it borrows the PState, like every group).
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<Group<'_>>> {
        let c = ranks.iter().map(|&r| rank_arg("rank", r)).collect::<Result<Vec<i32>>>()?;
        let mut g = ptr::null_mut();
        check(unsafe { sys::pstate_new_group(self.as_raw(), c.as_ptr(), c.len(), &mut g) })?;
        let Some(raw) = NonNull::new(g) else { return Ok(None) };
        let mut info = sys::pstate_group_info_init();
        check(unsafe { sys::pstate_group_info(raw.as_ptr(), &mut info) })?;
        Ok(Some(Group { raw, info: GroupInfo::from_c(GroupKind::Custom, &info), _ps: PhantomData }))
    }
}
