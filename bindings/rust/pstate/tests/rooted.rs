//! reduce and scatter on 3 ranks (pstate run -n 3, see common.rs): from every root, in place and
//! into a separate buffer, `None` for the buffer a rank other than the root does not use; the
//! argument errors the safe API adds (a root without its buffer, a short buffer, a root that is
//! not a rank) on a group of one, where no peer waits for the refused call.
mod common;

use common::on_ranks;
use pstate::{GroupKind, InitOptions, PState, ParallelConfig, ReduceOp, Status};
use std::time::Duration;

#[test]
fn reduce_and_scatter_from_every_root_three_ranks() {
    on_ranks("reduce_and_scatter_from_every_root_three_ranks", 3, || {
        let mut ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).expect("init");
        ps.initialize_model_parallel(&ParallelConfig { tensor_parallel: 3, ..Default::default() }).unwrap();
        {
            let g = ps.world().unwrap();
            let (n, r) = (g.world_size(), g.rank_in_group());
            // rank k's row: j * (k+1) + k
            let rows: Vec<Vec<i64>> = (0..n).map(|k| (0..7).map(|j| (j * (k + 1) + k) as i64).collect()).collect();
            let sum: Vec<i64> = (0..7).map(|j| rows.iter().map(|row| row[j]).sum()).collect();
            let max: Vec<f32> = (0..7).map(|j| rows.iter().map(|row| row[j] as f32).fold(f32::MIN, f32::max)).collect();
            for root in 0..n {
                let mut out = vec![0i64; 7];
                g.reduce(&rows[r], if r == root { Some(&mut out[..]) } else { None }, ReduceOp::Sum, root).unwrap();
                if r == root {
                    assert_eq!(out, sum, "reduce to {root}");
                }
                let mut x: Vec<f32> = rows[r].iter().map(|&v| v as f32).collect();
                g.reduce_in_place(&mut x, ReduceOp::Max, root).unwrap();
                if r == root {
                    assert_eq!(x, max, "reduce_in_place to {root}");
                } else {
                    assert_eq!(x, rows[r].iter().map(|&v| v as f32).collect::<Vec<_>>(), "send changed off the root");
                }
                let all: Vec<i64> = rows.concat();
                let mut mine = vec![-1i64; 7];
                g.scatter(if r == root { Some(&all[..]) } else { None }, &mut mine, root).unwrap();
                assert_eq!(mine, rows[r], "scatter from {root}");
            }
        }
        {
            // A group of one: every rank is the root, so a refused call leaves no peer waiting.
            let solo = ps.group(GroupKind::SelfPp).unwrap();
            let a = [1u8, 2, 3];
            let mut short = [0u8; 2];
            let errs = [
                solo.reduce(&a, None, ReduceOp::Sum, 0).err().unwrap(),
                solo.reduce(&a, Some(&mut short[..]), ReduceOp::Sum, 0).err().unwrap(),
                solo.scatter(None, &mut short, 0).err().unwrap(),
                solo.scatter(Some(&a[..1]), &mut short, 0).err().unwrap(),
                solo.reduce(&a, None, ReduceOp::Sum, usize::MAX).err().unwrap(),
                solo.scatter(Some(&a[..]), &mut [0u8; 3], 1).err().unwrap(), // C: not a rank of the group
            ];
            for e in &errs {
                assert_eq!(e.status, Status::InvalidArgument, "{e}");
                assert!(!e.detail.is_empty());
            }
            let mut out = [0u8; 3];
            solo.scatter(Some(&a[..]), &mut out, 0).unwrap();
            assert_eq!(out, a);
        }
        ps.finalize().unwrap();
    });
}

// ---- issue 46: a refusal that only the root can see fails the call on every rank -------------

/// Rank r's input of call k: 10k + r, twice.
fn row_of(k: usize, r: usize) -> Vec<i32> {
    vec![(10 * k + r) as i32; 2]
}

/// The refused call's error on this rank: InvalidArgument, with this crate's own text on the
/// refusing rank, and the library's, naming the refusing rank, elsewhere.
fn refused_everywhere(result: pstate::Result<()>, refuser: usize, me: usize, text: &str) {
    let e = result.expect_err("the refused call must fail on every rank");
    assert_eq!(e.status, Status::InvalidArgument, "{e}");
    if me == refuser {
        assert!(e.detail.contains(text), "{e}");
    } else {
        assert!(e.detail.contains("refused its part of this call") && e.detail.contains(&format!("(group rank {refuser})")), "{e}");
    }
}

/// For every root of a world of two, each refused call (`refused(group, k, root, variant)`, the
/// root's buffer bad in `variant`) and then a good one (`good`, which checks its own data): the
/// good call after a refusal must never be paired with the refused one (before: the others went
/// into the refused call and returned the root's next call's data, a gather one call behind).
fn root_refusals(name: &str, variants: usize, refused: impl Fn(&pstate::Group<'_>, usize, usize, usize) -> pstate::Result<()>,
                 good: impl Fn(&pstate::Group<'_>, usize, usize), text: &str) {
    on_ranks(name, 2, || {
        let ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).expect("init");
        {
            let g = ps.world().unwrap();
            let (n, me) = (g.world_size(), g.rank_in_group());
            let mut k = 0;
            for root in 0..n {
                for variant in 0..variants {
                    k += 1;
                    refused_everywhere(refused(&g, k, root, variant), root, me, text);
                    k += 1;
                    good(&g, k, root);
                }
            }
            g.barrier().unwrap();
        }
        ps.finalize().unwrap();
    });
}

#[test]
fn gather_recv_refused_on_the_root_fails_every_rank_and_keeps_step_two_ranks() {
    root_refusals(
        "gather_recv_refused_on_the_root_fails_every_rank_and_keeps_step_two_ranks",
        2,
        |g, k, root, variant| {
            let mut short = vec![0i32; 3];
            let mut ignored = vec![0i32; 4];
            let recv = match (g.rank_in_group() == root, variant) {
                (true, 0) => None,                // the root without its recv
                (true, _) => Some(&mut short[..]), // too short
                (false, _) => Some(&mut ignored[..]),
            };
            g.gather(&row_of(k, g.rank_in_group()), recv, root)
        },
        |g, k, root| {
            let mut got = vec![0i32; 4];
            let me = g.rank_in_group();
            g.gather(&row_of(k, me), if me == root { Some(&mut got[..]) } else { None }, root).unwrap();
            if me == root {
                assert_eq!(got, [row_of(k, 0), row_of(k, 1)].concat(), "gather after a refused one");
            }
        },
        "recv",
    );
}

#[test]
fn reduce_recv_refused_on_the_root_fails_every_rank_and_keeps_step_two_ranks() {
    root_refusals(
        "reduce_recv_refused_on_the_root_fails_every_rank_and_keeps_step_two_ranks",
        2,
        |g, k, root, variant| {
            let mut short = vec![0i32; 1];
            let recv = match (g.rank_in_group() == root, variant) {
                (true, 0) => None,
                (true, _) => Some(&mut short[..]),
                (false, _) => None,
            };
            g.reduce(&row_of(k, g.rank_in_group()), recv, ReduceOp::Sum, root)
        },
        |g, k, root| {
            let mut got = vec![0i32; 2];
            let me = g.rank_in_group();
            g.reduce(&row_of(k, me), if me == root { Some(&mut got[..]) } else { None }, ReduceOp::Sum, root).unwrap();
            if me == root {
                assert_eq!(got, vec![(20 * k + 1) as i32; 2], "reduce after a refused one");
            }
        },
        "recv",
    );
}

#[test]
fn scatter_send_refused_on_the_root_fails_every_rank_and_keeps_step_two_ranks() {
    root_refusals(
        "scatter_send_refused_on_the_root_fails_every_rank_and_keeps_step_two_ranks",
        2,
        |g, _k, root, variant| {
            let short = vec![0i32; 3];
            let send = match (g.rank_in_group() == root, variant) {
                (true, 0) => None,
                (true, _) => Some(&short[..]),
                (false, _) => None,
            };
            g.scatter(send, &mut [0i32; 2], root)
        },
        |g, k, root| {
            let me = g.rank_in_group();
            let all = [row_of(k, 0), row_of(k, 1)].concat();
            let mut got = vec![0i32; 2];
            g.scatter(if me == root { Some(&all[..]) } else { None }, &mut got, root).unwrap();
            assert_eq!(got, row_of(k, me), "scatter after a refused one");
        },
        "send",
    );
}

/// A symmetric call: one rank's own recv (too short) fails the call on every rank too.
#[test]
fn all_reduce_recv_refused_on_one_rank_fails_every_rank_and_keeps_step_two_ranks() {
    root_refusals(
        "all_reduce_recv_refused_on_one_rank_fails_every_rank_and_keeps_step_two_ranks",
        1,
        |g, k, root, _| {
            let mut recv = vec![0i32; if g.rank_in_group() == root { 1 } else { 2 }];
            g.all_reduce_into(&row_of(k, g.rank_in_group()), &mut recv, ReduceOp::Sum)
        },
        |g, k, _| {
            let mut x = row_of(k, g.rank_in_group());
            g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
            assert_eq!(x, vec![(20 * k + 1) as i32; 2], "all_reduce after a refused one");
        },
        "recv",
    );
}
