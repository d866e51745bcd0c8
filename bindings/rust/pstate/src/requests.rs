//! Non-blocking point-to-point: `pstate_isend` / `pstate_irecv` + `pstate_wait` / `pstate_test`
//! (SGLang's P2PWork, vLLM's isend/irecv), in two sound forms.
//!
//! - **Requests that own their buffers.** [`Group::isend`] / [`Group::irecv`] take the buffer by
//!   value: a `Vec<T>`, `Box<[T]>`, `&'static mut [T]`, and for sends also `Arc<[T]>` /
//!   `Rc<[T]>` (one buffer to several peers) or `&'static [T]` (any [`SendBuf`] /
//!   [`RecvBuf`]). The [`Request`] holds it; [`Request::wait`] gives it back, so a serving loop
//!   reuses one allocation step after step:
//!
//!   ```no_run
//!   # fn f(pp: &pstate::Group<'_>, prev: usize, steps: usize) -> pstate::Result<()> {
//!   let mut hidden = vec![0f32; 4096];
//!   for _ in 0..steps {
//!       let req = pp.irecv(hidden, prev)?; // posted; hidden moved into the request
//!       // ... other work while the activations arrive ...
//!       hidden = req.wait()?; // the same allocation, filled
//!       println!("{}", hidden[0]);
//!   }
//!   # Ok(()) }
//!   ```
//!
//! - **Scoped requests over borrowed slices.** [`scope`] (like `std::thread::scope`) lends
//!   `&mut [T]` / `&[T]` — a part of a larger buffer, a field of a struct — to requests posted
//!   with [`Scope::irecv`] / [`Scope::isend`], and returns only when every one of them has
//!   completed. [`ScopedRequest::wait`] gives the slice back inside the scope:
//!
//!   ```no_run
//!   # fn f(w: &pstate::Group<'_>, prev: usize, next: usize) -> pstate::Result<()> {
//!   let mut halo = vec![0f32; 8];
//!   let edge = [1f32; 4];
//!   let (from_prev, from_next) = halo.split_at_mut(4);
//!   pstate::scope(|s| {
//!       let a = s.irecv(w, from_prev, prev)?;
//!       s.irecv(w, from_next, next)?; // no handle kept: the scope completes it
//!       s.isend(w, &edge, next)?;
//!       s.isend(w, &edge, prev)?;
//!       let a = a.wait()?; // &mut [f32], readable again
//!       println!("{}", a[0]);
//!       Ok(())
//!   })?; // every request is complete here
//!   println!("{:?}", halo);
//!   # Ok(()) }
//!   ```
//!
//! # Why this is sound
//!
//! A posted request uses its buffer until `pstate_wait` returns, `pstate_test` reports it done,
//! or `pstate_finalize` / `pstate_abort` / `pstate_shrink` / `pstate_grow` of its PState returns
//! (they cancel pending requests; pstate.h). Until then the library may write a receive buffer
//! (read a send buffer) during any later call on the PState — and if the request is never
//! completed, for as long as the PState lives. Rust cannot promise that a destructor runs
//! (`std::mem::forget`, an `Rc` cycle), so no guarantee may rest on a handle's `Drop`: a request
//! that *borrowed* its buffer and waited in `Drop` (this crate before) let safe code forget it,
//! end the borrow, free the buffer and have the library write into the next allocation.
//!
//! - An owned request holds the buffer itself. Nothing else can reach that memory (the
//!   [`RecvBuf`] contract: exclusively owned; [`SendBuf`]: nobody writes it), and the request
//!   drops the buffer only after the library has finished with it (a `pstate_wait` that freed
//!   the request, or `pstate_test` reporting it done). Forgetting the request forgets the
//!   buffer with it: its memory is leaked, never freed or reused, so whatever the library still
//!   writes lands in memory that nothing else owns. The buffer types are `'static` (a borrow
//!   inside one would end when the request is forgotten), and their memory does not move when
//!   the request moves (`Vec`'s heap, not an array inside the request).
//! - A scope's requests belong to the [`Scope`], a local of [`scope`]'s own stack frame, which
//!   safe code cannot leak; the closure gets `&Scope` and [`ScopedRequest`] handles, which own
//!   no guarantee (forgetting one is harmless). The slices are borrowed for `'scope`, which
//!   lasts until `scope` returns, and `scope` completes every request still pending before it
//!   returns, normally or by unwinding (the `Scope`'s `Drop` runs during the unwind of `scope`'s
//!   frame, which is not skippable). The closure is generic over `'scope`, so neither a handle
//!   nor a lent slice can leave it.
//! - Both borrow the PState (`'ps`) while pending, so it cannot be finalized, moved to another
//!   thread or have its groups destroyed meanwhile, and both are not `Send` (driven on the
//!   PState's thread, as C's thread rules want). After `mem::forget` of an owned request that
//!   borrow ends: the C request is simply never completed (pstate.h: it leaks a few dozen
//!   bytes); finalize, abort, shrink or grow cancel it, and `destroy_model_parallel` refuses
//!   (`Status::InvalidState`) while a model-parallel group has it pending.
//! - pstate.h: `pstate_wait` frees the request and returns the operation's status, except for
//!   INVALID_ARGUMENT (not a request) and BUSY (another thread inside a call on the
//!   context), where it keeps it. Neither can happen here (the handle is always a live request,
//!   and the borrows above keep other threads out), but if one did, an owned request leaks its
//!   buffer instead of dropping it, and a scope waits again.
//!
//! The old pattern no longer compiles. A borrowed slice is not an owned buffer:
//!
//! ```compile_fail,E0597
//! fn f(w: &pstate::Group<'_>) {
//!     let mut buf = vec![0f32; 4];
//!     let req = w.irecv(&mut buf[..], 1).unwrap(); // needs a buffer the request can own
//!     std::mem::forget(req);
//!     drop(buf); // (the library would write into freed memory)
//! }
//! ```
//! An owned buffer is gone once posted; forgetting the request does not bring it back:
//!
//! ```compile_fail,E0382
//! fn f(w: &pstate::Group<'_>) {
//!     let buf = vec![0f32; 4];
//!     let req = w.irecv(buf, 1).unwrap();
//!     std::mem::forget(req);
//!     println!("{}", buf[0]); // moved into the (leaked) request
//! }
//! ```
//! A shared buffer (`Arc`) can be sent, never received into:
//!
//! ```compile_fail,E0277
//! fn f(w: &pstate::Group<'_>) {
//!     let buf: std::sync::Arc<[f32]> = vec![0f32; 4].into();
//!     let _ = w.irecv(buf, 1);
//! }
//! ```
//! Forgetting a scoped handle leaves the slice lent until the scope ends:
//!
//! ```compile_fail,E0499
//! fn f(w: &pstate::Group<'_>) -> pstate::Result<()> {
//!     let mut buf = vec![0f32; 4];
//!     pstate::scope(|s| {
//!         let req = s.irecv(w, &mut buf, 1)?;
//!         std::mem::forget(req);
//!         let again = &mut buf; // still lent to the pending receive
//!         again[0] = 1.0;
//!         Ok(())
//!     })
//! }
//! ```
//! A pending scoped receive cannot be read, and a pending scoped send cannot be changed:
//!
//! ```compile_fail,E0502
//! fn f(w: &pstate::Group<'_>) -> pstate::Result<()> {
//!     let mut buf = vec![0f32; 4];
//!     pstate::scope(|s| {
//!         let req = s.irecv(w, &mut buf, 1)?;
//!         println!("{}", buf[0]);
//!         req.wait()?;
//!         Ok(())
//!     })
//! }
//! ```
//! ```compile_fail,E0506
//! fn f(w: &pstate::Group<'_>) -> pstate::Result<()> {
//!     let mut buf = [1f32; 4];
//!     pstate::scope(|s| {
//!         s.isend(w, &buf, 1)?;
//!         buf[0] = 2.0;
//!         Ok(())
//!     })
//! }
//! ```
//! A handle cannot leave its scope (nor, with it, the lent slice):
//!
//! ```compile_fail
//! fn f(w: &pstate::Group<'_>) {
//!     let mut buf = vec![0f32; 4];
//!     let req = pstate::scope(|s| s.irecv(w, &mut buf, 1)).unwrap();
//!     drop(req);
//! }
//! ```
//! A request borrows the PState: no finalize while it is pending.
//!
//! ```compile_fail,E0505
//! fn f(ps: pstate::PState) {
//!     let req = ps.world().unwrap().irecv(vec![0f32; 4], 1).unwrap();
//!     ps.finalize().unwrap();
//!     req.wait().unwrap();
//! }
//! ```
//! A request is driven by the thread of its PState (C: one thread at a time per context):
//!
//! ```compile_fail,E0277
//! fn needs_send<T: Send>(_: T) {}
//! fn f(w: &pstate::Group<'_>) { needs_send(w.irecv(vec![0f32; 4], 1).unwrap()); }
//! ```
use crate::error::{check, Error, Result, Status};
use crate::types::Element;
use crate::{sys, Group, PState};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

/// A buffer an owned send request may hold ([`Group::isend`]).
///
/// # Safety
/// For a value `b` of the implementing type:
/// 1. `b.as_slice()` names the same memory (pointer and length) every time it is called, before
///    and after `b` is moved: the elements do not live inside `b` itself;
/// 2. that memory stays allocated and nobody writes it until `b` is dropped, and forever when
///    `b` is leaked (`std::mem::forget`): the library reads it until the request completes,
///    which for a forgotten request may be never.
///
/// Hence `'static`: a borrow held inside `b` would end when `b` is forgotten.
pub unsafe trait SendBuf: 'static {
    type Elem: Element;
    fn as_slice(&self) -> &[Self::Elem];
}

/// A buffer an owned receive request may hold ([`Group::irecv`]).
///
/// # Safety
/// As [`SendBuf`], and: `as_mut_slice` names the same memory as `as_slice`, and nothing but `b`
/// reads or writes that memory until `b` is dropped, forever when `b` is leaked (the library
/// writes it at unknown times until the request completes).
pub unsafe trait RecvBuf: SendBuf {
    fn as_mut_slice(&mut self) -> &mut [Self::Elem];
}

// SAFETY (each): the elements are on the heap (or static), owned by the value or shared
// read-only; dropping the value is the only way to free them; a leaked Arc/Rc keeps its count.
unsafe impl<T: Element> SendBuf for Vec<T> {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
unsafe impl<T: Element> RecvBuf for Vec<T> {
    fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }
}
unsafe impl<T: Element> SendBuf for Box<[T]> {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
unsafe impl<T: Element> RecvBuf for Box<[T]> {
    fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }
}
unsafe impl<T: Element> SendBuf for &'static mut [T] {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
unsafe impl<T: Element> RecvBuf for &'static mut [T] {
    fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }
}
unsafe impl<T: Element> SendBuf for &'static [T] {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
// Shared buffers: Element types have no interior mutability, and Arc::get_mut / make_mut never
// write in place while the request holds a count (forgotten: forever).
unsafe impl<T: Element> SendBuf for Arc<[T]> {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
unsafe impl<T: Element> SendBuf for Arc<Vec<T>> {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
unsafe impl<T: Element> SendBuf for Rc<[T]> {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}
unsafe impl<T: Element> SendBuf for Rc<Vec<T>> {
    type Elem = T;
    fn as_slice(&self) -> &[T] {
        self
    }
}

/// Completes a pending C request with `pstate_wait`: the operation's result, and whether the
/// library freed the request (always, by pstate.h, except INVALID_ARGUMENT / INVALID_STATE:
/// then it kept it, maybe still pending, and its buffer must not be released).
///
/// # Safety
/// raw is a request from pstate_isend / pstate_irecv that no wait/test has freed.
unsafe fn wait_raw(raw: *mut sys::pstate_request_t) -> (Result<()>, bool) {
    let result = check(sys::pstate_wait(raw));
    let kept = matches!(&result, Err(e) if matches!(e.status, Status::InvalidArgument | Status::InvalidState));
    (result, !kept)
}

/// Progresses a pending C request once (`pstate_test`): `Some(result)` when it completed (the
/// library freed it), `None` while it is pending; `Err` of the call itself (it stays pending).
///
/// # Safety
/// As [`wait_raw`].
unsafe fn test_raw(raw: *mut sys::pstate_request_t) -> Result<Option<Result<()>>> {
    let mut done = 0;
    let status = sys::pstate_test(raw, &mut done);
    if done != 0 {
        return Ok(Some(check(status)));
    }
    check(status).map(|()| None)
}

enum State {
    Pending(*mut sys::pstate_request_t),
    Done(Result<()>),
}

/// One pending isend/irecv (SGLang's P2PWork) that owns its buffer `B` until it completes.
///
/// Complete it with [`Request::wait`], which returns the buffer, or poll [`Request::test`]
/// until `Ok(true)` and then `wait` (at once). The result stays: `test` and `wait` after an
/// error return it again. Dropping a pending request waits for it (at most the context timeout;
/// its error is ignored), then drops the buffer. Forgetting one (`std::mem::forget`) leaks the
/// buffer and the C request, which is sound (see the [module](crate::requests) documentation); on a
/// model-parallel group `destroy_model_parallel` then refuses until finalize.
///
/// It borrows the PState (not the [`Group`] value), so while it is pending the PState cannot
/// be finalized, moved to another thread, or have its groups destroyed. Not `Send`.
#[must_use = "a request must be completed (wait or test); dropping it waits"]
pub struct Request<'ps, B: SendBuf> {
    state: State,
    /// Initialized while `held`. A `MaybeUninit`, so that moving the request is no use of `B`
    /// (a `Box` or `&mut` inside it would otherwise be retagged, as Rust's aliasing model
    /// says, while the library writes through the pointer it was given).
    buf: MaybeUninit<B>,
    held: bool,
    _ps: PhantomData<&'ps PState>,
}

impl<'ps, B: SendBuf> Request<'ps, B> {
    /// Keeps `buf` in the request, then posts it with `post(&mut buf, &mut raw)`, so that the
    /// pointer C gets is derived from the buffer where the request holds it.
    fn post(buf: B, post: impl FnOnce(&mut B, &mut *mut sys::pstate_request_t) -> Result<()>) -> Result<Request<'ps, B>> {
        let mut req = Request { state: State::Done(Ok(())), buf: MaybeUninit::new(buf), held: true, _ps: PhantomData };
        let mut raw = ptr::null_mut();
        // SAFETY: initialized just above. On Err nothing was posted: Drop drops the buffer.
        post(unsafe { req.buf.assume_init_mut() }, &mut raw)?;
        if raw.is_null() {
            req.held = false; // OK without a request breaks pstate.h: leak the buffer, to be safe
            return Err(Error::new(Status::Internal, "isend/irecv: the library returned OK without a request (please report this)"));
        }
        req.state = State::Pending(raw);
        Ok(req)
    }

    /// Waits until the request completes (at most the context timeout) and returns its buffer,
    /// or the operation's error (`Status::Mismatch` for a message of another size, `Timeout`,
    /// `PeerLost`, `Aborted` after the context failed), dropping the buffer.
    pub fn wait(mut self) -> Result<B> {
        self.finish()?;
        debug_assert!(self.held);
        self.held = false;
        // SAFETY: held (finish released it only on an error), read once; Drop sees !held.
        Ok(unsafe { self.buf.assume_init_read() })
    }

    /// Progresses the transfer once without blocking: `Ok(true)` when the request completed
    /// (then `wait` returns the buffer at once), `Ok(false)` while it is pending, the
    /// operation's error when it completed with one (kept: `test`/`wait` return it again).
    pub fn test(&mut self) -> Result<bool> {
        if let State::Pending(raw) = self.state {
            // SAFETY: raw is pending (never freed: Done replaces it when the library frees it).
            match unsafe { test_raw(raw) }? {
                None => return Ok(false),
                Some(result) => self.state = State::Done(result),
            }
        }
        self.finish().map(|()| true)
    }

    /// Whether the request completed (through `test`).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done(_))
    }

    /// Completes the request if pending and returns its result; leaks the buffer when the
    /// library kept the request.
    fn finish(&mut self) -> Result<()> {
        if let State::Pending(raw) = self.state {
            // SAFETY: as in test.
            let (result, freed) = unsafe { wait_raw(raw) };
            if !freed {
                self.held = false; // the library may still use it: leaked, never dropped
            }
            self.state = State::Done(result);
        }
        match &self.state {
            State::Done(result) => result.clone(),
            State::Pending(_) => unreachable!(),
        }
    }
}

impl<B: SendBuf> Drop for Request<'_, B> {
    fn drop(&mut self) {
        let _ = self.finish();
        if self.held {
            // SAFETY: held and the library is done with it.
            unsafe { self.buf.assume_init_drop() };
        }
    }
}

impl<'ps> Group<'ps> {
    /// Posts a send of `buf` (a `Vec<T>`, `Box<[T]>`, `Arc<[T]>`, ... any [`SendBuf`]) to group
    /// rank `dst` and returns at once. The request owns `buf` until [`Request::wait`] gives it
    /// back; to send one buffer to several peers, post clones of an `Arc<[T]>`.
    pub fn isend<B: SendBuf>(&self, buf: B, dst: usize) -> Result<Request<'ps, B>> {
        let dst = self.rank_of("isend", "dst", dst)?;
        Request::post(buf, |b, raw| {
            let s = b.as_slice();
            check(unsafe { sys::pstate_isend(self.g(), s.as_ptr().cast(), s.len(), B::Elem::DTYPE.raw(), dst, ptr::null_mut(), raw) })
        })
    }

    /// Posts a receive of exactly `buf.len()` elements from group rank `src` into `buf` (a
    /// `Vec<T>`, `Box<[T]>` or `&'static mut [T]`: any [`RecvBuf`]) and returns at once. The
    /// request owns `buf` until [`Request::wait`] gives it back, filled.
    pub fn irecv<B: RecvBuf>(&self, buf: B, src: usize) -> Result<Request<'ps, B>> {
        let src = self.rank_of("irecv", "src", src)?;
        Request::post(buf, |b, raw| {
            let s = b.as_mut_slice();
            check(unsafe { sys::pstate_irecv(self.g(), s.as_mut_ptr().cast(), s.len(), B::Elem::DTYPE.raw(), src, ptr::null_mut(), raw) })
        })
    }
}

/// Runs `f` with a [`Scope`] in which requests may borrow their buffers, and returns once all
/// of them have completed (like `std::thread::scope`): those `f` did not complete are waited for
/// here, in the order they were posted, also when `f` returns an error or panics. Returns `f`'s
/// error, else the first error of a request completed here, else `f`'s value.
///
/// Groups and buffers must come from outside the closure (they outlive the scope); the group
/// borrows the PState for the whole scope.
pub fn scope<'env, F, R>(f: F) -> Result<R>
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
{
    let scope = Scope { slots: Slots(RefCell::new(Vec::new())), _scope: PhantomData, _env: PhantomData };
    let result = f(&scope);
    let rest = scope.slots.complete_all();
    result.and_then(|r| rest.map(|()| r))
    // (scope's Drop completes them when f unwinds)
}

/// The requests of one [`scope`]; see [`Scope::irecv`] and [`Scope::isend`].
pub struct Scope<'scope, 'env: 'scope> {
    slots: Slots,
    // Invariant in both, as std::thread::Scope: 'scope cannot be shortened.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// Every request posted in a scope, by index; completed ones hold their result.
struct Slots(RefCell<Vec<State>>);

impl Slots {
    fn push(&self, raw: *mut sys::pstate_request_t) -> usize {
        let mut v = self.0.borrow_mut();
        v.push(State::Pending(raw));
        v.len() - 1
    }

    /// Waits for slot i if pending; its result (a kept request stays pending, with the error).
    fn wait(&self, i: usize) -> Result<()> {
        let mut v = self.0.borrow_mut(); // nothing below calls back into Rust code that uses it
        if let State::Pending(raw) = v[i] {
            // SAFETY: a pending slot holds a live request (Done replaces it once freed).
            let (result, freed) = unsafe { wait_raw(raw) };
            if !freed {
                return result;
            }
            v[i] = State::Done(result);
        }
        match &v[i] {
            State::Done(result) => result.clone(),
            State::Pending(_) => unreachable!(),
        }
    }

    fn test(&self, i: usize) -> Result<bool> {
        {
            let mut v = self.0.borrow_mut();
            if let State::Pending(raw) = v[i] {
                // SAFETY: as in wait.
                match unsafe { test_raw(raw) }? {
                    None => return Ok(false),
                    Some(result) => v[i] = State::Done(result),
                }
            }
        }
        self.wait(i).map(|()| true)
    }

    /// Completes every pending request: the first error among them. A request the library
    /// keeps (another thread inside a call on the context, which safe code cannot arrange) is
    /// waited for again: its buffer is a borrow that ends when the scope does.
    fn complete_all(&self) -> Result<()> {
        let mut first = Ok(());
        let n = self.0.borrow().len();
        for i in 0..n {
            let pending = matches!(self.0.borrow()[i], State::Pending(_));
            if !pending {
                continue;
            }
            let mut result = self.wait(i);
            while matches!(self.0.borrow()[i], State::Pending(_)) {
                if matches!(&result, Err(e) if e.status == Status::InvalidArgument) {
                    // The library says this is not a request, yet it never freed it: nothing
                    // is known about the borrowed buffer, so nothing may continue.
                    let why = result.as_ref().err().map_or(String::new(), ToString::to_string);
                    eprintln!("pstate: the end of a scope: waiting for a pending request was refused ({why}); aborting the process");
                    std::process::abort();
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
                result = self.wait(i);
            }
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        let _ = self.complete_all(); // after complete_all in scope: nothing left; else unwinding
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Posts a send of `buf` to group rank `dst` of `g`; `buf` stays borrowed (readable, not
    /// writable) until the scope ends, or until [`ScopedRequest::wait`] gives it back.
    pub fn isend<'ps: 'scope, T: Element>(&'scope self, g: &Group<'ps>, buf: &'scope [T], dst: usize) -> Result<ScopedRequest<'scope, &'scope [T]>> {
        let dst = g.rank_of("Scope::isend", "dst", dst)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::pstate_isend(g.g(), buf.as_ptr().cast(), buf.len(), T::DTYPE.raw(), dst, ptr::null_mut(), &mut raw) })?;
        Ok(self.handle(raw, buf.as_ptr() as *mut T, buf.len()))
    }

    /// Posts a receive of exactly `buf.len()` elements from group rank `src` of `g` into `buf`,
    /// which stays lent to the library until the scope ends, or until [`ScopedRequest::wait`]
    /// gives it back, filled.
    pub fn irecv<'ps: 'scope, T: Element>(&'scope self, g: &Group<'ps>, buf: &'scope mut [T], src: usize) -> Result<ScopedRequest<'scope, &'scope mut [T]>> {
        let src = g.rank_of("Scope::irecv", "src", src)?;
        let (p, n) = (buf.as_mut_ptr(), buf.len());
        let mut raw = ptr::null_mut();
        check(unsafe { sys::pstate_irecv(g.g(), p.cast(), n, T::DTYPE.raw(), src, ptr::null_mut(), &mut raw) })?;
        Ok(self.handle(raw, p, n))
    }

    fn handle<B: Lent<'scope>>(&'scope self, raw: *mut sys::pstate_request_t, p: *mut B::Elem, n: usize) -> ScopedRequest<'scope, B> {
        // (raw is never null after OK; a null slot would only make the scope's wait fail)
        ScopedRequest { slots: &self.slots, index: self.slots.push(raw), ptr: p, len: n, _buf: PhantomData }
    }
}

/// A slice a [`ScopedRequest`] gives back: `&'a [T]` (a send) or `&'a mut [T]` (a receive).
/// Sealed.
pub trait Lent<'a>: lent::Sealed {
    #[doc(hidden)]
    type Elem;
    #[doc(hidden)]
    /// # Safety
    /// p and n come from a borrow of this type and lifetime that nothing else uses.
    unsafe fn from_raw(p: *mut Self::Elem, n: usize) -> Self;
}
mod lent {
    pub trait Sealed {}
    impl<T> Sealed for &[T] {}
    impl<T> Sealed for &mut [T] {}
}
impl<'a, T> Lent<'a> for &'a [T] {
    type Elem = T;
    unsafe fn from_raw(p: *mut T, n: usize) -> Self {
        std::slice::from_raw_parts(p, n)
    }
}
impl<'a, T> Lent<'a> for &'a mut [T] {
    type Elem = T;
    unsafe fn from_raw(p: *mut T, n: usize) -> Self {
        std::slice::from_raw_parts_mut(p, n)
    }
}

/// A request of a [`scope`], lending it `B` (`&'scope [T]` or `&'scope mut [T]`). The scope
/// owns the C request: dropping or forgetting the handle leaves the request to the scope, which
/// completes it before it returns. Not `Send`.
pub struct ScopedRequest<'scope, B: Lent<'scope>> {
    slots: &'scope Slots,
    index: usize,
    // The lent slice as raw parts: the borrow was handed to the library, and is made again
    // only once the library is done with it.
    ptr: *mut B::Elem,
    len: usize,
    _buf: PhantomData<B>,
}

impl<'scope, B: Lent<'scope>> ScopedRequest<'scope, B> {
    /// Waits until the request completes (at most the context timeout) and gives the slice back,
    /// or returns the operation's error (the slice then stays lent until the scope ends).
    pub fn wait(self) -> Result<B> {
        self.slots.wait(self.index)?;
        // SAFETY: the request completed, so the library is done with the slice, which was
        // borrowed for 'scope and handed to this handle alone; self is consumed.
        Ok(unsafe { B::from_raw(self.ptr, self.len) })
    }

    /// Progresses the transfer once without blocking: `Ok(true)` when the request completed
    /// (then `wait` returns the slice at once), `Ok(false)` while it is pending, the
    /// operation's error when it completed with one (kept: returned again).
    pub fn test(&mut self) -> Result<bool> {
        self.slots.test(self.index)
    }

    /// Whether the request completed.
    pub fn is_done(&self) -> bool {
        matches!(self.slots.0.borrow()[self.index], State::Done(_))
    }
}
