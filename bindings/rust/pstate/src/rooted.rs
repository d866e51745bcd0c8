//! The rooted reductions and scatters of a [`Group`]: `pstate_reduce` and `pstate_scatter`
//! (MPI_Reduce / MPI_Scatter, torch.distributed.reduce / scatter). Kept in their own impl block
//! beside lib.rs's collectives; the buffer each rank does not use is an `Option`, `None` there.
use crate::error::{check, Error, Result, Status};
use crate::types::{Element, ReduceOp};
use crate::{sys, Group};
use std::ptr;

impl Group<'_> {
    /// On group rank `root`, recv (send.len() elements) = op over the group of send. recv must be
    /// `Some` there and is ignored (pass `None`) elsewhere.
    pub fn reduce<T: Element>(&self, send: &[T], recv: Option<&mut [T]>, op: ReduceOp, root: usize) -> Result<()> {
        let root_i = self.rank_of("reduce", "root", root)?;
        let recv_ptr = match recv {
            Some(r) => {
                self.need("reduce", "recv", r.len(), send.len())?;
                r.as_mut_ptr().cast()
            }
            None if self.rank_in_group() == root => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("{}: recv is None on the root (group rank {root}), which needs Some of {} elements", self.op("reduce"), send.len()),
                ))
            }
            None => ptr::null_mut(),
        };
        check(unsafe {
            sys::pstate_reduce(self.g(), send.as_ptr().cast(), recv_ptr, send.len(), T::DTYPE.raw(), op.raw(), root_i, ptr::null_mut())
        })
    }

    /// buf reduced with op over the group into buf on group rank `root` (in place there); buf
    /// is only read on the other ranks.
    pub fn reduce_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        let root_i = self.rank_of("reduce_in_place", "root", root)?;
        let p = buf.as_mut_ptr();
        let recv = if self.rank_in_group() == root { p.cast() } else { ptr::null_mut() };
        check(unsafe { sys::pstate_reduce(self.g(), p.cast(), recv, buf.len(), T::DTYPE.raw(), op.raw(), root_i, ptr::null_mut()) })
    }

    /// send on group rank `root` holds world_size blocks of recv.len() elements; block r lands
    /// in recv on group rank r. send must be `Some` on the root and is ignored (pass `None`)
    /// elsewhere.
    pub fn scatter<T: Element>(&self, send: Option<&[T]>, recv: &mut [T], root: usize) -> Result<()> {
        let root_i = self.rank_of("scatter", "root", root)?;
        let send_ptr = match send {
            Some(s) => {
                self.need("scatter", "send", s.len(), recv.len() * self.world_size())?;
                s.as_ptr().cast()
            }
            None if self.rank_in_group() == root => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("{}: send is None on the root (group rank {root}), which needs Some of {} elements", self.op("scatter"), recv.len() * self.world_size()),
                ))
            }
            None => ptr::null(),
        };
        check(unsafe {
            sys::pstate_scatter(self.g(), send_ptr, recv.as_mut_ptr().cast(), recv.len(), T::DTYPE.raw(), root_i, ptr::null_mut())
        })
    }
}
