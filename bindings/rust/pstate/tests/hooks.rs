//! `PState::add_hook` (pstate_add_hook) on 2 ranks launched with `pstate run` (common.rs): a Rust
//! closure sees every call Before and After, in order, with its status (issue 45, hooks);
//! `Verdict::Refuse` refuses rank 1's all_reduce of 3 elements on both ranks and the group goes
//! on; a removed hook sees nothing; a revoke through an AbortHandle gives one Abort.
mod common;

use common::on_ranks;
use pstate::{DType, HookPhase, InitOptions, PState, ReduceOp, Status, Verdict};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
struct Seen {
    phase: HookPhase,
    status: Option<Status>,
    call_id: u64,
    operation: String,
    group: String,
    dtype: Option<DType>,
    bytes: u64,
    peer: Option<usize>,
    seq: Option<u64>,
    has_send: bool,
}

#[test]
fn hooks_see_every_call_in_order_refuse_and_abort_two_ranks() {
    on_ranks("hooks_see_every_call_in_order_refuse_and_abort_two_ranks", 2, || {
        let ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(20)), ..Default::default() }).expect("init");
        let r = ps.rank();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let id = ps
            .add_hook(move |info| {
                log.lock().unwrap().push(Seen {
                    phase: info.phase,
                    status: info.status,
                    call_id: info.call_id,
                    operation: info.operation.to_string(),
                    group: info.group.to_string(),
                    dtype: info.dtype,
                    bytes: info.bytes,
                    peer: info.peer,
                    seq: info.seq,
                    has_send: info.send.is_some(),
                });
                if info.phase == HookPhase::Before && r == 1 && info.operation == "all_reduce" && info.count == 3 {
                    Verdict::Refuse
                } else {
                    Verdict::Go
                }
            })
            .unwrap();
        let w = ps.world().unwrap();
        let mut x = vec![1.0f32, 2.0, 3.0, 4.0];
        w.all_reduce(&mut x, ReduceOp::Sum).unwrap();
        w.barrier().unwrap();
        if r == 0 {
            w.send(&[1i64, 2], 1).unwrap();
        } else {
            let mut b = [0i64; 2];
            w.recv(&mut b, 0).unwrap();
        }
        let mut three = vec![1.0f32; 3];
        let e = w.all_reduce(&mut three, ReduceOp::Sum).unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument, "{e}");
        assert!(e.to_string().contains(if r == 1 { "refused by hook" } else { "rank 1" }), "{e}");
        let mut y = vec![1.0f32; 2];
        w.all_reduce(&mut y, ReduceOp::Sum).unwrap();
        assert_eq!(y, vec![2.0, 2.0]);
        let p2p = if r == 0 { "send" } else { "recv" };
        let want = [
            ("all_reduce", None),
            ("barrier", None),
            (p2p, None),
            ("all_reduce", Some(Status::InvalidArgument)),
            ("all_reduce", None),
        ];
        {
            let s = seen.lock().unwrap();
            assert_eq!(s.len(), 2 * want.len(), "{s:?}");
            for (k, (op, status)) in want.iter().enumerate() {
                let (b, a) = (&s[2 * k], &s[2 * k + 1]);
                assert!(b.phase == HookPhase::Before && a.phase == HookPhase::After, "call {k}: {b:?} {a:?}");
                assert!(b.operation == *op && a.operation == *op && a.status == *status, "call {k}: {b:?} {a:?}");
                assert!(b.call_id == a.call_id && b.group == "world:0", "call {k}: {b:?} {a:?}");
                assert!(k == 0 || b.call_id > s[2 * k - 2].call_id, "call {k}: ids out of order: {s:?}");
            }
            assert!(s[0].dtype == Some(DType::Float32) && s[0].bytes == 16 && s[0].has_send && s[0].seq.is_some(), "{:?}", s[0]);
            assert!(s[4].peer == Some(1 - r) && s[4].seq.is_none(), "{:?}", s[4]);
        }
        ps.remove_hook(id).unwrap();
        assert_eq!(ps.remove_hook(id).unwrap_err().status, Status::InvalidArgument);
        let n = seen.lock().unwrap().len();
        w.barrier().unwrap();
        assert_eq!(seen.lock().unwrap().len(), n, "a removed hook saw a call");
        drop(w);
        let log = seen.clone();
        ps.add_hook(move |info| {
            if info.phase == HookPhase::Abort {
                log.lock().unwrap().push(Seen {
                    phase: info.phase,
                    status: info.status,
                    call_id: 0,
                    operation: info.operation.to_string(),
                    group: String::new(),
                    dtype: None,
                    bytes: 0,
                    peer: None,
                    seq: None,
                    has_send: false,
                });
            }
            Verdict::Go
        })
        .unwrap();
        ps.abort_handle().abort().unwrap(); // pstate_revoke, as a watchdog does
        ps.abort().unwrap();
        let s = seen.lock().unwrap();
        let aborts: Vec<_> = s.iter().filter(|e| e.phase == HookPhase::Abort).collect();
        assert_eq!(aborts.len(), 1, "{aborts:?}");
        assert!(aborts[0].operation == "pstate_revoke" && aborts[0].status == Some(Status::Aborted), "{:?}", aborts[0]);
    });
}
