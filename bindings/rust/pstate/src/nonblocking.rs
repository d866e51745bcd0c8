//! Variable-count collectives (`pstate_all_gatherv`, `pstate_reduce_scatterv`), batched
//! point-to-point (`pstate_p2p_batch`), custom groups (`pstate_new_group`) and sliced tensor dicts
//! (`pstate_send/recv_tensor_dict_sliced`).
//!
//! Non-blocking point-to-point requests are in [`crate::requests`]. [`Group::p2p_batch`] needs
//! nothing of the kind: it returns only when every op of the batch completed (or failed, the
//! library having cancelled the rest), so a [`P2POp`] borrows its buffer for the call alone and
//! forgetting one is harmless. In a CUDA context the batch is enqueued on the stream, but the
//! library refuses host memory there, and the safe API passes nothing else.
use crate::error::{check, Error, Result, Status};
use crate::types::{Element, GroupKind, ReduceOp};
use crate::{rank_arg, sys, Group, GroupInfo, PState, REFUSED_DTYPE};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// One send or receive of [`Group::p2p_batch`], borrowing its buffer.
pub struct P2POp<'a> {
    raw: sys::pstate_p2p_op_t,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> P2POp<'a> {
    fn new(is_send: bool, buf: *mut std::ffi::c_void, count: usize, dtype: sys::pstate_dtype_t, peer: usize) -> Result<P2POp<'a>> {
        let op = if is_send { "P2POp::send" } else { "P2POp::recv" };
        let mut raw = sys::pstate_p2p_op_init();
        raw.is_send = is_send as i32;
        raw.buf = buf;
        raw.count = count;
        raw.dtype = dtype;
        raw.peer = rank_arg(op, "peer", peer)?;
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

// One side of an all_to_all_v: one count and displacement per group rank; returns the elements
// the side spans (the largest displacement + count of a non-empty part).
fn v_side(g: &Group<'_>, side: &str, counts: &[usize], displs: &[usize]) -> Result<usize> {
    let n = g.world_size();
    if counts.len() != n || displs.len() != n {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("all_to_all_v on {}: {side} counts and displacements have {} and {} entries, the group has {n} ranks", g.name(), counts.len(), displs.len()),
        ));
    }
    counts.iter().zip(displs).filter(|(c, _)| **c != 0).try_fold(0usize, |m, (&c, &d)| {
        d.checked_add(c)
            .map(|end| m.max(end))
            .ok_or_else(|| Error::new(Status::InvalidArgument, format!("all_to_all_v on {}: {side} displacement {d} + count {c} overflows", g.name())))
    })
}

impl<'ps> Group<'ps> {
    /// SGLang's all_gatherv with sizes: `counts[i]` is group rank i's element count (the same on
    /// every rank); `send` holds `counts[rank_in_group]` elements; `recv` (at least sum(counts))
    /// receives every rank's part packed in group-rank order.
    pub fn all_gatherv<T: Element>(&self, send: &[T], recv: &mut [T], counts: &[usize]) -> Result<()> {
        let checked = counts_arg(self, "all_gatherv", counts).and_then(|total| {
            let mine = counts[self.rank_in_group()];
            if send.len() != mine {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("all_gatherv on {}: send holds {} elements but counts[{}] (this rank) is {mine}", self.name(), send.len(), self.rank_in_group()),
                ));
            }
            self.need("all_gatherv", "recv", recv.len(), total)
        });
        let ones = vec![1usize; self.world_size()];
        self.together(checked, |g| unsafe { sys::pstate_all_gatherv(g, ptr::null(), ptr::null_mut(), ones.as_ptr(), REFUSED_DTYPE, ptr::null_mut()) })?;
        check(unsafe {
            sys::pstate_all_gatherv(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), counts.as_ptr(), T::DTYPE.raw(), ptr::null_mut())
        })
    }

    /// SGLang's reduce_scatterv with sizes: `send` holds sum(counts) elements; group rank i
    /// receives in `recv` (at least `counts[i]`) the reduction of the `counts[i]` elements at
    /// offset `counts[0] + ... + counts[i-1]`.
    pub fn reduce_scatterv<T: Element>(&self, send: &[T], recv: &mut [T], counts: &[usize], op: ReduceOp) -> Result<()> {
        let checked = counts_arg(self, "reduce_scatterv", counts).and_then(|total| {
            if send.len() != total {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("reduce_scatterv on {}: send holds {} elements but sum(counts) is {total}", self.name(), send.len()),
                ));
            }
            self.need("reduce_scatterv", "recv", recv.len(), counts[self.rank_in_group()])
        });
        let ones = vec![1usize; self.world_size()];
        self.together(checked, |g| unsafe {
            sys::pstate_reduce_scatterv(g, ptr::null(), ptr::null_mut(), ones.as_ptr(), REFUSED_DTYPE, ReduceOp::Sum.raw(), ptr::null_mut())
        })?;
        check(unsafe {
            sys::pstate_reduce_scatterv(self.g(), send.as_ptr().cast(), recv.as_mut_ptr().cast(), counts.as_ptr(), T::DTYPE.raw(), op.raw(), ptr::null_mut())
        })
    }

    /// MPI_Alltoallv (`pstate_all_to_all_v`): `send_counts[j]` elements at `send_displs[j]` of
    /// `send` go to group rank j; `recv_counts[i]` elements from group rank i land at
    /// `recv_displs[i]` of `recv` (counts and displacements in elements, one entry per group rank).
    /// Every pair must agree (this rank's `send_counts[j]` is rank j's `recv_counts[this rank]`),
    /// else [`Status::Mismatch`] on every rank.
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let checked = v_side(self, "send", send_counts, send_displs)
            .and_then(|extent| self.need("all_to_all_v", "send", send.len(), extent))
            .and_then(|_| v_side(self, "recv", recv_counts, recv_displs))
            .and_then(|extent| self.need("all_to_all_v", "recv", recv.len(), extent));
        self.together(checked, |g| unsafe {
            sys::pstate_all_to_all_v(g, ptr::null(), ptr::null(), ptr::null(), ptr::null_mut(), ptr::null(), ptr::null(), REFUSED_DTYPE, ptr::null_mut())
        })?;
        check(unsafe {
            sys::pstate_all_to_all_v(
                self.g(),
                send.as_ptr().cast(),
                send_counts.as_ptr(),
                send_displs.as_ptr(),
                recv.as_mut_ptr().cast(),
                recv_counts.as_ptr(),
                recv_displs.as_ptr(),
                T::DTYPE.raw(),
                ptr::null_mut(),
            )
        })
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
        let dst = self.rank_of("send_tensor_dict_sliced", "dst", dst)?;
        let a = self.ag(ag);
        self.send_dict("send_tensor_dict_sliced", tensors, |dict| unsafe { sys::pstate_send_tensor_dict_sliced(self.g(), dict.ptr(), dict.len(), dst, a, ptr::null_mut()) })
    }

    /// The next dict sent with [`Group::send_tensor_dict_sliced`] by group rank `src`;
    /// collective over `ag` (every rank of ag calls it, each from its own sender). Every tensor
    /// arrives whole.
    pub fn recv_tensor_dict_sliced(&self, src: usize, ag: &Group<'ps>) -> Result<Vec<crate::Tensor>> {
        let src = self.rank_of("recv_tensor_dict_sliced", "src", src)?;
        let a = self.ag(ag);
        self.receive_dict(|alloc, user| unsafe { sys::pstate_recv_tensor_dict_sliced(self.g(), src, a, alloc, user, ptr::null_mut()) })
    }
}

impl PState {
    /// SGLang's create_custom_parallel_group (vLLM's new_group): collective over the world,
    /// every rank passing the global ranks of the group it joins (strictly ascending, itself
    /// among them) or `&[]` to join none (`Ok(None)`). The group's kind is
    /// [`GroupKind::Custom`], its name `"custom:<n>"`; [`PState::destroy_model_parallel`] retires
    /// it (it borrows the PState, like every group).
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<Group<'_>>> {
        let c = ranks.iter().map(|&r| rank_arg("PState::new_group", "rank", r)).collect::<Result<Vec<i32>>>()?;
        let mut g = ptr::null_mut();
        check(unsafe { sys::pstate_new_group(self.as_raw(), c.as_ptr(), c.len(), &mut g) })?;
        let Some(raw) = NonNull::new(g) else { return Ok(None) };
        let mut info = sys::pstate_group_info_init();
        check(unsafe { sys::pstate_group_info(raw.as_ptr(), &mut info) })?;
        Ok(Some(Group { raw, info: GroupInfo::from_c(GroupKind::Custom, &info), _ps: PhantomData }))
    }
}
