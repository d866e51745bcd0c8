//! `Group::all_to_all_v` (pstate_all_to_all_v) on 3 ranks launched with `pstate run`
//! (common.rs): uneven counts with zeros, packed and with the parts reversed with gaps, checked
//! against a reference computed here; a pair whose counts disagree is Mismatch on every rank and
//! the next call works; the binding's own refusal on one rank is InvalidArgument on every rank.
mod common;

use common::on_ranks;
use pstate::{InitOptions, PState, Status};
use std::time::Duration;

fn count(i: usize, j: usize) -> usize {
    (i + 2 * j) % 4
}

fn value(i: usize, j: usize, k: usize) -> i32 {
    (1000 * i + 100 * j + k) as i32
}

/// Displacements of the parts in reverse rank order with a gap of `gap` after each; the extent.
fn place(counts: &[usize], gap: usize) -> (Vec<usize>, usize) {
    let mut displs = vec![0; counts.len()];
    let mut at = 0;
    for j in (0..counts.len()).rev() {
        displs[j] = at;
        at += counts[j] + gap;
    }
    (displs, at)
}

#[test]
fn all_to_all_v_uneven_reversed_mismatch_and_refusal_three_ranks() {
    on_ranks("all_to_all_v_uneven_reversed_mismatch_and_refusal_three_ranks", 3, || {
        let ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(20)), ..Default::default() }).expect("init");
        let w = ps.world().unwrap();
        let (r, n) = (w.rank_in_group(), w.world_size());
        let sc: Vec<usize> = (0..n).map(|j| count(r, j)).collect();
        let rc: Vec<usize> = (0..n).map(|i| count(i, r)).collect();
        for gap in [0usize, 2] {
            let (sd, s_extent) = place(&sc, gap);
            let (rd, r_extent) = place(&rc, gap);
            let mut send = vec![-1i32; s_extent];
            for j in 0..n {
                for k in 0..sc[j] {
                    send[sd[j] + k] = value(r, j, k);
                }
            }
            let mut recv = vec![-7i32; r_extent];
            let mut want = recv.clone();
            for i in 0..n {
                for k in 0..rc[i] {
                    want[rd[i] + k] = value(i, r, k);
                }
            }
            w.all_to_all_v(&send, &sc, &sd, &mut recv, &rc, &rd).unwrap();
            assert_eq!(recv, want, "gap {gap}");
        }
        let (sd, s_extent) = place(&sc, 0);
        let (rd, r_extent) = place(&rc, 0);
        let send: Vec<i32> = (0..s_extent as i32).collect();
        let mut recv = vec![0i32; r_extent + 1];
        // group rank 0 sends one element more to group rank 1 than rank 1 expects
        let mut bad = sc.clone();
        if r == 0 {
            bad[1] += 1;
        }
        let (bd, _) = place(&bad, 0);
        let big = vec![0i32; 64];
        let e = w.all_to_all_v(&big, &bad, &bd, &mut recv, &rc, &rd).err().expect("mismatch");
        assert_eq!(e.status, Status::Mismatch, "{}", e.detail);
        assert!(e.detail.contains("group rank 0 (rank 0) sends"), "{}", e.detail);
        w.all_to_all_v(&send, &sc, &sd, &mut recv, &rc, &rd).unwrap();
        // the binding's refusal on rank 2 (send shorter than its counts) fails every rank
        let short = if r == 2 { &send[..s_extent - 1] } else { &send[..] };
        let e = w.all_to_all_v(short, &sc, &sd, &mut recv, &rc, &rd).err().expect("refusal");
        assert_eq!(e.status, Status::InvalidArgument, "{}", e.detail);
        w.all_to_all_v(&send, &sc, &sd, &mut recv, &rc, &rd).unwrap();
    });
}
