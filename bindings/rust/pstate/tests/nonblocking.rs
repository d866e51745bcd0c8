//! On 4 ranks (TP 2 x PP 2, pstate run -n 4, see common.rs): all_gatherv / reduce_scatterv with
//! uneven counts (a zero among them), a p2p batch with every peer listed in reverse order, a
//! custom group of ranks 0-2 (rank 3 joins none), sliced tensor dicts from PP stage 0 to stage 1
//! gathered over TP, and the errors of the safe API and of the library. (Requests: requests.rs.)
mod common;

use common::on_ranks;
use pstate::{GroupKind, InitOptions, P2POp, PState, ParallelConfig, ReduceOp, Status, Tensor};
use std::time::Duration;

#[test]
fn variable_counts_batch_custom_group_sliced_dicts_four_ranks() {
    on_ranks("variable_counts_batch_custom_group_sliced_dicts_four_ranks", 4, || {
        let mut ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).expect("init");
        ps.initialize_model_parallel(&ParallelConfig { pipeline_parallel: 2, ..Default::default() }).unwrap();
        let w = ps.world().unwrap();
        let (r, n) = (w.rank_in_group(), w.world_size());

        let counts = [2usize, 0, 3, 1];
        let mine: Vec<f32> = (0..counts[r]).map(|k| (100 * r + k) as f32).collect();
        let mut got = vec![0f32; 6];
        w.all_gatherv(&mine, &mut got, &counts).unwrap();
        let want: Vec<f32> = counts.iter().enumerate().flat_map(|(i, &c)| (0..c).map(move |k| (100 * i + k) as f32)).collect();
        assert_eq!(got, want);
        assert_eq!(w.all_gatherv(&mine, &mut got, &counts[..2]).unwrap_err().status, Status::InvalidArgument);

        let rs = [1usize, 3, 0, 2];
        let send: Vec<i64> = (0..6).map(|k| (k * (r + 1)) as i64).collect();
        let mut part = vec![0i64; rs[r]];
        w.reduce_scatterv(&send, &mut part, &rs, ReduceOp::Sum).unwrap();
        let off: usize = rs[..r].iter().sum();
        let want: Vec<i64> = (0..rs[r]).map(|k| ((off + k) * (1 + 2 + 3 + 4)) as i64).collect();
        assert_eq!(part, want);
        let e = w.reduce_scatterv(&send[..5], &mut part, &rs, ReduceOp::Sum).unwrap_err();
        assert!(e.status == Status::InvalidArgument && e.detail.contains("sum(counts) is 6"), "{e}");

        // batch with every peer, in reverse order
        let mut recvs = vec![[0i32; 2]; n];
        let sends: Vec<[i32; 2]> = (0..n).map(|p| [r as i32, p as i32]).collect();
        {
            let mut ops = Vec::new();
            for (p, buf) in recvs.iter_mut().enumerate().rev() {
                if p != r {
                    ops.push(P2POp::recv(&mut buf[..], p).unwrap());
                    ops.push(P2POp::send(&sends[p][..], p).unwrap());
                }
            }
            w.p2p_batch(&ops).unwrap();
        }
        for (p, got) in recvs.iter().enumerate() {
            if p != r {
                assert_eq!(*got, [p as i32, r as i32], "from {p}");
            }
        }
        w.p2p_batch(&[]).unwrap();
        let bad = [P2POp::send(&[1i32][..], n).unwrap()];
        assert_eq!(w.p2p_batch(&bad).unwrap_err().status, Status::InvalidArgument);

        // custom group
        let join: &[usize] = if r < 3 { &[0, 1, 2] } else { &[] };
        let g = ps.new_group(join).unwrap();
        match g {
            None => assert_eq!(r, 3),
            Some(g) => {
                assert!(g.kind() == GroupKind::Custom && g.name().starts_with("custom:") && g.ranks().unwrap() == vec![0, 1, 2], "{:?}", g.info());
                let mut x = [(r + 1) as f32];
                g.all_reduce(&mut x, ReduceOp::Sum).unwrap();
                assert_eq!(x, [6.0]);
            }
        }
        assert_eq!(ps.new_group(&[0, 2, 1, 3]).err().unwrap().status, Status::InvalidArgument);

        // sliced dicts: stage 0 -> stage 1 over PP, sliced over TP
        let (tp, pp) = (ps.group(GroupKind::Tp).unwrap(), ps.group(GroupKind::Pp).unwrap());
        let h = Tensor::from_slice("h", &[2, 4], &[0f32, 1., 2., 3., 4., 5., 6., 7.]).unwrap();
        let odd = Tensor::from_slice("odd", &[3], &[0i64, 1, 2]).unwrap();
        if pp.rank_in_group() == 0 {
            pp.send_tensor_dict_sliced(&[h, odd], 1, &tp).unwrap();
        } else {
            let d = pp.recv_tensor_dict_sliced(0, &tp).unwrap();
            assert_eq!(d.len(), 2);
            assert_eq!((d[0].name.as_str(), d[1].name.as_str()), ("h", "odd"));
            assert_eq!(d[0].to_vec::<f32>().unwrap(), vec![0f32, 1., 2., 3., 4., 5., 6., 7.]);
            assert_eq!(d[0].shape, vec![2, 4]);
            assert_eq!(d[1].to_vec::<i64>().unwrap(), vec![0i64, 1, 2]);
        }

        drop((w, tp, pp));
        ps.abort().unwrap();
    });
}
