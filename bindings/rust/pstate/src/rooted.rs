//! The rooted reductions and scatters of a [`Group`]: `pstate_reduce` and `pstate_scatter`
//! (MPI_Reduce / MPI_Scatter, torch.distributed.reduce / scatter). Kept in their own impl block
//! beside lib.rs's collectives; the buffer each rank does not use is an `Option`, `None` there.
use crate::error::{check, Error, Result, Status};
use crate::types::{Element, ReduceOp};
use crate::{sys, Group, REFUSED_DTYPE};
use std::ffi::c_void;
use std::ptr;

impl Group<'_> {
    /// On group rank `root`, recv (send.len() elements) = op over the group of send. recv must be
    /// `Some` there and is ignored (pass `None`) elsewhere. A recv the root refuses fails the call
    /// on every rank of the group at once (`Group::together`).
    pub fn reduce<T: Element>(&self, send: &[T], recv: Option<&mut [T]>, op: ReduceOp, root: usize) -> Result<()> {
        let checked = (|| {
            let root_i = self.rank_of("reduce", "root", root)?;
            let recv_ptr: *mut c_void = match recv {
                Some(r) if self.rank_in_group() == root => {
                    self.need("reduce", "recv", r.len(), send.len())?;
                    r.as_mut_ptr().cast()
                }
                Some(_) => ptr::null_mut(), // ignored off the root: never written
                None if self.rank_in_group() == root => {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("{}: recv is None on the root (group rank {root}), which needs Some of {} elements", self.op("reduce"), send.len()),
                    ))
                }
                None => ptr::null_mut(),
            };
            Ok((root_i, recv_ptr))
        })();
        let (root_i, recv_ptr) = self.together(checked, |g| unsafe {
            sys::pstate_reduce(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ReduceOp::Sum.raw(), 0, ptr::null_mut())
        })?;
        check(unsafe {
            sys::pstate_reduce(self.g(), send.as_ptr().cast(), recv_ptr, send.len(), T::DTYPE.raw(), op.raw(), root_i, ptr::null_mut())
        })
    }

    /// buf reduced with op over the group into buf on group rank `root` (in place there); buf
    /// is only read on the other ranks.
    pub fn reduce_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        let root_i = self.together(self.rank_of("reduce_in_place", "root", root), |g| unsafe {
            sys::pstate_reduce(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, ReduceOp::Sum.raw(), 0, ptr::null_mut())
        })?;
        let p = buf.as_mut_ptr();
        let recv = if self.rank_in_group() == root { p.cast() } else { ptr::null_mut() };
        check(unsafe { sys::pstate_reduce(self.g(), p.cast(), recv, buf.len(), T::DTYPE.raw(), op.raw(), root_i, ptr::null_mut()) })
    }

    /// send on group rank `root` holds world_size blocks of recv.len() elements; block r lands
    /// in recv on group rank r. send must be `Some` on the root and is ignored (pass `None`)
    /// elsewhere. A send the root refuses fails the call on every rank of the group at once
    /// (`Group::together`).
    pub fn scatter<T: Element>(&self, send: Option<&[T]>, recv: &mut [T], root: usize) -> Result<()> {
        let checked = (|| {
            let root_i = self.rank_of("scatter", "root", root)?;
            let send_ptr: *const c_void = match send {
                Some(s) if self.rank_in_group() == root => {
                    self.need("scatter", "send", s.len(), recv.len() * self.world_size())?;
                    s.as_ptr().cast()
                }
                Some(_) => ptr::null(), // ignored off the root: never read
                None if self.rank_in_group() == root => {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("{}: send is None on the root (group rank {root}), which needs Some of {} elements", self.op("scatter"), recv.len() * self.world_size()),
                    ))
                }
                None => ptr::null(),
            };
            Ok((root_i, send_ptr))
        })();
        let (root_i, send_ptr) = self.together(checked, |g| unsafe {
            sys::pstate_scatter(g, ptr::null(), ptr::null_mut(), 1, REFUSED_DTYPE, 0, ptr::null_mut())
        })?;
        check(unsafe { sys::pstate_scatter(self.g(), send_ptr, recv.as_mut_ptr().cast(), recv.len(), T::DTYPE.raw(), root_i, ptr::null_mut()) })
    }
}
