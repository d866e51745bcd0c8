//! Requests on 4 ranks (TP 2 x PP 2, pstate run -n 4, see common.rs), on the world group:
//! - owned buffers: one Vec pair reused over steps with out-of-order waits, a Box<[T]> polled
//!   with test, an Arc<[T]> sent to every peer while receiving from every peer (waits in reverse
//!   order), and a pending request dropped unwaited (a RecvBuf of the test's own whose Drop
//!   records what it held: the message, so Drop waited first);
//! - forgetting: a pending irecv of an owned Vec is forgotten, new Vecs of the same size are
//!   allocated and filled, then its message lands in the leaked buffer and every new Vec is
//!   untouched; a forgotten isend of an Arc keeps its count and still delivers;
//! - scopes over borrowed slices: two halves of one buffer from both neighbours (a handle waited
//!   and written, one forgotten, the sends left to the scope), test until done, a closure that
//!   fails and one that panics (the scope completes the requests first in both);
//! - destroy_model_parallel refusing while a forgotten TP request is pending; Mismatch from an
//!   owned request's test (then test and wait return it again) and from a scope's end.
mod common;

use common::on_ranks;
use pstate::{Group, GroupKind, InitOptions, PState, ParallelConfig, RecvBuf, ReduceOp, SendBuf, Status};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A receive buffer of the user's own type; its Drop records what it held.
struct Recorder {
    data: Vec<u8>,
    seen: Rc<RefCell<Option<Vec<u8>>>>,
}

// SAFETY: the elements are data's heap buffer, owned by the value alone.
unsafe impl SendBuf for Recorder {
    type Elem = u8;
    fn as_slice(&self) -> &[u8] {
        &self.data
    }
}
unsafe impl RecvBuf for Recorder {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.data
    }
}
impl Drop for Recorder {
    fn drop(&mut self) {
        *self.seen.borrow_mut() = Some(self.data.clone());
    }
}

fn neighbours(w: &Group<'_>) -> (usize, usize, usize, usize) {
    let (r, n) = (w.rank_in_group(), w.world_size());
    (r, n, (r + n - 1) % n, (r + 1) % n)
}

fn owned_buffers(w: &Group<'_>) {
    let (r, n, prev, next) = neighbours(w);
    // a ring with one Vec pair reused over steps; the send posted first is waited for last
    let (mut out, mut inb) = (vec![0f32; 3], vec![0f32; 3]);
    let inb_at = inb.as_ptr();
    for step in 0..3 {
        out.fill((10 * step + r) as f32);
        let s = w.isend(out, next).unwrap();
        let q = w.irecv(inb, prev).unwrap();
        inb = q.wait().unwrap();
        out = s.wait().unwrap();
        assert_eq!(inb, vec![(10 * step + prev) as f32; 3], "step {step}");
    }
    assert_eq!(inb.as_ptr(), inb_at, "wait gives back the same allocation");

    // a Box<[i64]> polled with test until done; wait then returns it at once
    let mut q = w.irecv(vec![0i64; 2].into_boxed_slice(), prev).unwrap();
    w.send(&[r as i64, 10 * r as i64], next).unwrap();
    while !q.test().unwrap() {}
    assert!(q.is_done() && q.test().unwrap());
    assert_eq!(&q.wait().unwrap()[..], &[prev as i64, 10 * prev as i64]);

    // one Arc<[f32]> sent to every peer while receiving from every peer; waits in reverse order
    let shared: Arc<[f32]> = vec![r as f32; 5].into();
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    for p in (0..n).filter(|&p| p != r) {
        recvs.push((p, w.irecv(vec![0f32; 5], p).unwrap()));
        sends.push(w.isend(Arc::clone(&shared), p).unwrap());
    }
    assert_eq!(Arc::strong_count(&shared), n);
    for (p, q) in recvs.into_iter().rev() {
        assert_eq!(q.wait().unwrap(), vec![p as f32; 5], "from {p}");
    }
    for s in sends.into_iter().rev() {
        s.wait().unwrap();
    }
    assert_eq!(Arc::strong_count(&shared), 1);

    // dropped unwaited: Drop waits, then drops the buffer (which records the message)
    let seen = Rc::new(RefCell::new(None));
    let sent: Rc<[u8]> = vec![r as u8; 4].into();
    {
        let _q = w.irecv(Recorder { data: vec![0u8; 4], seen: Rc::clone(&seen) }, prev).unwrap();
        let _s = w.isend(Rc::clone(&sent), next).unwrap();
    }
    assert_eq!(seen.borrow().as_deref(), Some(&[prev as u8; 4][..]));
    assert_eq!(Rc::strong_count(&sent), 1);
}

fn forgotten_requests(w: &Group<'_>) {
    let (r, _, prev, next) = neighbours(w);
    const N: usize = 64 << 10; // below glibc's mmap threshold: a freed block is the next one given
    let leaked = vec![0u8; N];
    let leaked_at = leaked.as_ptr() as usize;
    std::mem::forget(w.irecv(leaked, prev).unwrap()); // pending: nothing was sent yet
    let fresh: Vec<Vec<u8>> = (0..32).map(|_| vec![0xAB; N]).collect();
    assert!(fresh.iter().all(|v| v.as_ptr() as usize != leaked_at), "the pending buffer was freed");
    w.barrier().unwrap();
    w.isend(vec![0x50 | r as u8; N], next).unwrap().wait().unwrap();
    // every rank drives the transport until each has seen the message in its leaked buffer
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // SAFETY: the leaked buffer is never freed, and the library writes it only inside
        // pstate calls on this thread, none of which is running now.
        let landed = unsafe { std::slice::from_raw_parts(leaked_at as *const u8, N) }.iter().all(|&b| b == 0x50 | prev as u8);
        let mut all = [landed as i32];
        w.all_reduce(&mut all, ReduceOp::Min).unwrap();
        if all[0] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the forgotten receive never completed");
    }
    assert!(fresh.iter().all(|v| v.iter().all(|&b| b == 0xAB)), "the library wrote into a new Vec");

    // a forgotten send of an Arc: its count is leaked with it, and the message still arrives
    let payload: Arc<[i32]> = vec![r as i32; 16].into();
    std::mem::forget(w.isend(Arc::clone(&payload), next).unwrap());
    assert_eq!(Arc::strong_count(&payload), 2);
    assert_eq!(w.irecv(vec![0i32; 16], prev).unwrap().wait().unwrap(), vec![prev as i32; 16]);
    w.barrier().unwrap();
}

fn scoped_requests(w: &Group<'_>) {
    let (r, n, prev, next) = neighbours(w);
    // halves of one buffer from both neighbours
    let mut halo = vec![0i32; 6];
    let edge = [r as i32; 3];
    {
        let (lo, hi) = halo.split_at_mut(3);
        pstate::scope(|s| {
            let from_prev = s.irecv(w, lo, prev)?;
            std::mem::forget(s.irecv(w, hi, next)?); // the scope still completes it
            s.isend(w, &edge, next)?;
            s.isend(w, &edge, prev)?;
            let lo = from_prev.wait()?; // given back, writable
            assert_eq!(lo, &[prev as i32; 3]);
            lo[0] = -1;
            Ok(())
        })
        .unwrap();
    }
    let (p, q) = (prev as i32, next as i32);
    assert_eq!(halo, vec![-1, p, p, q, q, q]);

    // test until done, then wait gives the slice back at once
    let mut two = [0u8; 2];
    let got = pstate::scope(|s| {
        let mut q = s.irecv(w, &mut two, prev)?;
        w.send(&[r as u8, 7], next)?;
        while !q.test()? {}
        assert!(q.is_done());
        Ok(q.wait()?.to_vec())
    })
    .unwrap();
    assert_eq!((got, two), (vec![prev as u8, 7], [prev as u8, 7]));

    // the closure fails after posting: the scope completes the requests, then returns the error
    let mut buf = vec![0f64; 4];
    let out = [r as f64; 4];
    let err = pstate::scope(|s| -> pstate::Result<()> {
        s.irecv(w, &mut buf, prev)?;
        s.isend(w, &out, next)?;
        w.send(&[0u8], n)?; // not a rank: InvalidArgument
        unreachable!()
    })
    .unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument, "{err}");
    assert_eq!(buf, vec![prev as f64; 4]);

    // the closure panics after posting: the scope completes the requests while unwinding
    let mut buf = vec![0u32; 3];
    let out = [r as u32; 3];
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // an expected panic: no message, no backtrace
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pstate::scope(|s| -> pstate::Result<()> {
            s.irecv(w, &mut buf, prev)?;
            s.isend(w, &out, next)?;
            panic!("a panic inside a scope");
        })
    }));
    std::panic::set_hook(hook);
    assert!(caught.is_err());
    assert_eq!(buf, vec![prev as u32; 3]);
    w.barrier().unwrap();
}

#[test]
fn owned_forgotten_and_scoped_requests_four_ranks() {
    on_ranks("owned_forgotten_and_scoped_requests_four_ranks", 4, || {
        let mut ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).expect("init");
        ps.initialize_model_parallel(&ParallelConfig { pipeline_parallel: 2, ..Default::default() }).unwrap();
        let r = {
            let w = ps.world().unwrap();
            owned_buffers(&w);
            forgotten_requests(&w);
            scoped_requests(&w);
            // a receive from the TP peer that nobody sends, forgotten
            let tp = ps.group(GroupKind::Tp).unwrap();
            std::mem::forget(tp.irecv(vec![0f32; 2], 1 - tp.rank_in_group()).unwrap());
            w.rank_in_group()
        };
        let e = ps.destroy_model_parallel().unwrap_err();
        assert!(e.status == Status::InvalidState && e.detail.contains("pending"), "{e}");

        // a receive of another size: Mismatch, kept by the request; and at a scope's end
        let w = ps.world().unwrap();
        match r {
            0 => {
                for dst in [1, 2] {
                    w.isend(vec![1f32, 2., 3.], dst).unwrap().wait().unwrap();
                }
            }
            1 => {
                let mut q = w.irecv(vec![0f32; 2], 0).unwrap();
                let e = loop {
                    match q.test() {
                        Ok(false) => continue,
                        Ok(true) => panic!("a 3-element message completed a 2-element receive"),
                        Err(e) => break e,
                    }
                };
                assert_eq!(e.status, Status::Mismatch, "{e}");
                assert_eq!(q.test().unwrap_err(), e);
                assert_eq!(q.wait().unwrap_err(), e);
            }
            2 => {
                let mut small = [0f32; 2];
                let e = pstate::scope(|s| {
                    s.irecv(&w, &mut small, 0)?;
                    Ok(())
                })
                .unwrap_err();
                assert_eq!(e.status, Status::Mismatch, "{e}");
            }
            _ => {}
        }
        drop(w);
        ps.abort().unwrap(); // cancels the forgotten TP receive
    });
}
