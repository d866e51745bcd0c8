//! Multi-rank tests: each launches this test binary on N ranks with `pstate run` (common.rs);
//! every rank computes the expected results itself and panics on the first difference.
mod common;

use common::{in_rank, launch, on_ranks};
use pstate::{Bf16, DType, Element, Group, GroupKind, InitOptions, PState, ParallelConfig, ReduceOp, Status};
use std::time::Duration;

fn init() -> PState {
    PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).expect("init")
}

fn env_usize(name: &str) -> usize {
    std::env::var(name).unwrap().parse().unwrap()
}

#[test]
fn lifecycle_and_out_of_order_calls_two_ranks() {
    on_ranks("lifecycle_and_out_of_order_calls_two_ranks", 2, || {
        let mut ps = init();
        {
            let w = ps.world().unwrap();
            assert_eq!((w.world_size(), w.info().rank), (env_usize("WORLD_SIZE"), env_usize("RANK")));
        }
        assert!(!ps.model_parallel_is_initialized());
        assert_eq!(ps.live_ranks().unwrap(), vec![0, 1]); // nobody died
        // shrink with nobody dead: the same world, renumbered as before (no model-parallel groups yet)
        let rank = ps.rank();
        assert_eq!(ps.shrink().unwrap(), vec![0, 1]);
        assert_eq!((ps.world_size(), ps.rank()), (2, rank));
        let world_sum_of_ones = |ps: &PState| {
            let w = ps.world().unwrap(); // shrink replaced the world group: fetched again
            assert_eq!((w.world_size(), w.info().rank), (2, rank));
            let mut ones = [1i32; 3];
            w.all_reduce(&mut ones, ReduceOp::Sum).unwrap();
            assert_eq!(ones, [2; 3]);
        };
        world_sum_of_ones(&ps);
        // grow with nobody waiting to join: Timeout, the world unchanged and usable
        assert_eq!(ps.grow(300).err().unwrap().status, Status::Timeout);
        world_sum_of_ones(&ps);
        assert_eq!(ps.live_ranks().unwrap(), vec![0, 1]);
        assert_eq!(ps.group(GroupKind::Tp).err().unwrap().status, Status::InvalidState);
        ps.initialize_model_parallel(&ParallelConfig { tensor_parallel: 2, ..Default::default() }).unwrap();
        assert!(ps.model_parallel_is_initialized());
        let again = ps.initialize_model_parallel(&ParallelConfig::default()).err().unwrap();
        assert_eq!(again.status, Status::InvalidState);
        assert!(!again.detail.is_empty());
        ps.group(GroupKind::Tp).unwrap().barrier().unwrap();
        ps.destroy_model_parallel().unwrap(); // no Group alive: the borrow checker made sure
        assert_eq!(ps.destroy_model_parallel().err().unwrap().status, Status::InvalidState);
        ps.world().unwrap().barrier().unwrap();
        ps.finalize().unwrap();
        // (a second init in the same job would reuse MASTER_PORT while a peer may still be
        // tearing down its first store; the other tests end by Drop, which finalizes)
    });
}

#[test]
fn group_info_of_tp2_pp2_matches_sglang_four_ranks() {
    on_ranks("group_info_of_tp2_pp2_matches_sglang_four_ranks", 4, || {
        let mut ps = init();
        ps.initialize_model_parallel(&ParallelConfig { tensor_parallel: 2, pipeline_parallel: 2, ..Default::default() }).unwrap();
        let rank = env_usize("RANK");
        let tp_ranks: Vec<usize> = (rank / 2 * 2..rank / 2 * 2 + 2).collect();
        let pp_ranks: Vec<usize> = (rank % 2..4).step_by(2).collect();
        for (kind, ranks) in [(GroupKind::Tp, tp_ranks), (GroupKind::Pp, pp_ranks)] {
            let g = ps.group(kind).unwrap();
            let i = ranks.iter().position(|&r| r == rank).unwrap();
            let n = ranks.len();
            assert_eq!(g.ranks().unwrap(), ranks);
            let info = g.info();
            assert_eq!((info.kind, info.rank, info.rank_in_group, info.world_size), (kind, rank, i, n));
            assert_eq!((info.first_rank, info.last_rank), (ranks[0], ranks[n - 1]));
            assert_eq!((info.next_rank, info.prev_rank), (ranks[(i + 1) % n], ranks[(i + n - 1) % n]));
            assert!(info.name.starts_with(&format!("{}:", kind.name())), "{}", info.name);
            assert_eq!(g.same_node(0).unwrap(), vec![true; n]);
        }
        ps.finalize().unwrap();
    });
}

/// Rank k's input: j * (k+1) + k for j in 0..4n, as T.
fn rows<T: Element>(n: usize, conv: fn(i64) -> T) -> Vec<Vec<T>> {
    (0..n).map(|k| (0..4 * n).map(|j| conv((j * (k + 1) + k) as i64)).collect()).collect()
}

fn ops_on<T: Element + PartialEq + PartialOrd + std::fmt::Debug + std::ops::Add<Output = T>>(g: &Group, conv: fn(i64) -> T) {
    let (n, r) = (g.world_size(), g.rank_in_group());
    let rows = rows(n, conv);
    let mine = rows[r].clone();
    let sum: Vec<T> = (0..mine.len()).map(|j| rows.iter().skip(1).fold(rows[0][j], |a, row| a + row[j])).collect();
    let max: Vec<T> =
        (0..mine.len()).map(|j| rows.iter().map(|row| row[j]).fold(rows[0][j], |a, v| if v > a { v } else { a })).collect();
    let concat: Vec<T> = rows.concat();

    let mut x = mine.clone();
    g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
    assert_eq!(x, sum, "all_reduce sum on {}", g.name());
    let mut out = vec![conv(0); mine.len()];
    g.all_reduce_into(&mine, &mut out, ReduceOp::Max).unwrap();
    assert_eq!(out, max, "all_reduce max");
    let mut gathered = vec![conv(0); mine.len() * n];
    g.all_gather(&mine, &mut gathered).unwrap();
    assert_eq!(gathered, concat, "all_gather");
    let mut block = vec![conv(0); 4];
    g.reduce_scatter(&mine, &mut block, ReduceOp::Sum).unwrap();
    assert_eq!(block, sum[r * 4..(r + 1) * 4], "reduce_scatter");
    let mut b = mine.clone();
    g.broadcast(&mut b, n - 1).unwrap();
    assert_eq!(b, rows[n - 1], "broadcast");
    if r == 0 {
        let mut all = vec![conv(0); mine.len() * n];
        g.gather(&mine, Some(&mut all), 0).unwrap();
        assert_eq!(all, concat, "gather");
    } else {
        g.gather(&mine, None, 0).unwrap();
    }
    let a2a: Vec<T> = (0..n).flat_map(|k| rows[k][r * 4..(r + 1) * 4].to_vec()).collect();
    let mut got = vec![conv(0); mine.len()];
    g.all_to_all(&mine, &mut got).unwrap();
    assert_eq!(got, a2a, "all_to_all");
    if n > 1 {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let mut buf = vec![conv(0); mine.len()];
        if r % 2 == 0 {
            g.send(&mine, next).unwrap();
            g.recv(&mut buf, prev).unwrap();
        } else {
            g.recv(&mut buf, prev).unwrap();
            g.send(&mine, next).unwrap();
        }
        assert_eq!(buf, rows[prev], "send/recv");
    }
    g.barrier().unwrap();
}

#[test]
fn every_op_on_f32_and_i64_world_tp_pp_four_ranks() {
    on_ranks("every_op_on_f32_and_i64_world_tp_pp_four_ranks", 4, || {
        let mut ps = init();
        ps.initialize_model_parallel(&ParallelConfig { tensor_parallel: 2, pipeline_parallel: 2, ..Default::default() }).unwrap();
        for kind in [GroupKind::World, GroupKind::Tp, GroupKind::Pp] {
            let g = ps.group(kind).unwrap();
            ops_on::<f32>(&g, |v| v as f32);
            ops_on::<i64>(&g, |v| v);
        }
        let rank = env_usize("RANK");
        let tp_ranks = ps.group(GroupKind::Tp).unwrap().ranks().unwrap();
        let mut v = vec![(rank + 1) as f32; 3];
        ps.tp_all_reduce(&mut v, ReduceOp::Sum).unwrap();
        assert_eq!(v, vec![(tp_ranks[0] + tp_ranks[1] + 2) as f32; 3]);
        let mut got = vec![0i64; 2];
        ps.tp_all_gather(&[rank as i64], &mut got).unwrap();
        assert_eq!(got, vec![tp_ranks[0] as i64, tp_ranks[1] as i64]);
        // bfloat16 elements reduce through f32 (small integers are exact)
        let w = ps.world().unwrap();
        let mut h = vec![Bf16::from_f32(rank as f32 + 1.0); 2];
        w.all_reduce(&mut h, ReduceOp::Sum).unwrap();
        assert_eq!(h.iter().map(|x| x.to_f32()).collect::<Vec<_>>(), vec![10.0; 2]);
        drop(w);
        ps.finalize().unwrap();
    });
}

#[test]
fn object_broadcast_and_gather_two_ranks() {
    on_ranks("object_broadcast_and_gather_two_ranks", 2, || {
        let ps = init();
        let w = ps.world().unwrap();
        let r = w.rank_in_group();
        let payload: Vec<u8> = (0..1usize << 20).map(|i| (i * 7) as u8).collect();
        let got = w.broadcast_object(if r == 1 { &payload } else { &[] }, 1).unwrap();
        assert_eq!(got, payload);
        assert_eq!(w.broadcast_object(b"", 0).unwrap(), b"");
        let all = w.all_gather_object("x".repeat(r).as_bytes()).unwrap();
        assert_eq!(all, vec![b"".to_vec(), b"x".to_vec()]);
        if r == 0 {
            w.send_object(b"hello", 1).unwrap();
        } else {
            assert_eq!(w.recv_object(0).unwrap(), b"hello");
        }
        w.barrier().unwrap();
    });
}

#[test]
fn errors_map_to_statuses_two_ranks() {
    on_ranks("errors_map_to_statuses_two_ranks", 2, || {
        let ps = init();
        let w = ps.world().unwrap();
        // wrong dtype: fp8 cannot be reduced on CPU (the library refuses)
        let err = unsafe {
            w.all_reduce_device(std::ptr::null(), std::ptr::null_mut(), 0, DType::Fp8E4M3, ReduceOp::Sum, std::ptr::null_mut())
        }
        .err()
        .unwrap();
        assert_eq!(err.status, Status::Unsupported, "{err}");
        // recv too small (the binding refuses before C); mismatched element types do not compile
        let mut small = [0f32; 1];
        assert_eq!(w.all_gather(&[1f32, 2.0], &mut small).err().unwrap().status, Status::InvalidArgument);
        // bad rank: the library's text names it
        let err = w.broadcast(&mut [0f32; 2], 7).err().unwrap();
        assert_eq!(err.status, Status::InvalidArgument);
        assert!(err.detail.contains('7'), "{err}");
        // out of order
        assert_eq!(ps.group(GroupKind::Pp).err().unwrap().status, Status::InvalidState);
        assert_eq!(ps.graph_capture(std::ptr::null_mut()).err().unwrap().status, Status::Unsupported);
        // still usable
        let mut x = [1f64, 1.0];
        w.all_reduce(&mut x, ReduceOp::Sum).unwrap();
        assert_eq!(x, [2.0, 2.0]);
    });
}

#[test]
fn peer_killed_mid_op_returns_peer_lost_or_timeout() {
    const NAME: &str = "peer_killed_mid_op_returns_peer_lost_or_timeout";
    if in_rank(NAME) {
        // the launcher stops survivors with SIGTERM; this one must report first
        unsafe { libc_signal_ignore_sigterm() };
        let ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(3)), ..Default::default() }).unwrap();
        let w = ps.world().unwrap();
        w.barrier().unwrap();
        if w.rank_in_group() == 1 {
            unsafe { kill(getpid(), 9) };
        }
        let mut x = vec![1f32; 1 << 16];
        let err = w.all_reduce(&mut x, ReduceOp::Sum).err().expect("all_reduce with a dead peer succeeded");
        assert!(matches!(err.status, Status::PeerLost | Status::Timeout), "{err}");
        // before SURVIVOR: the parent's check of that line is what fails the test
        if err.status == Status::PeerLost {
            assert!(err.detail.contains("call PState::shrink (survivors go on without the dead) or PState::abort"), "{err}");
        }
        println!("\nSURVIVOR: {}", err.status.name());
        drop(w);
        ps.abort().unwrap();
        return;
    }
    let (ok, out) = launch(NAME, 2, 30000);
    assert!(!ok, "the job with a killed rank succeeded:\n{out}");
    assert!(
        out.contains("[0] SURVIVOR: PSTATE_ERR_PEER_LOST") || out.contains("[0] SURVIVOR: PSTATE_ERR_TIMEOUT"),
        "rank 0 did not report PEER_LOST/TIMEOUT:\n{out}"
    );
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn getpid() -> i32;
    fn signal(sig: i32, handler: usize) -> usize;
}

/// signal(SIGTERM, SIG_IGN) without the libc crate (SIGTERM = 15, SIG_IGN = 1 on Linux).
unsafe fn libc_signal_ignore_sigterm() {
    signal(15, 1);
}
