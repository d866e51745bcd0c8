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
