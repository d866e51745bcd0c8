//! Tensor dicts on several ranks (launched with `pstate run`, common/mod.rs): every rank builds
//! the dicts its peers send from the same recipe (`dict_of`) and compares what it received with
//! its own construction, including typed values, 0-d, 0-size, bfloat16/fp8 and a tensor above
//! the library's inline limit.
mod common;

use common::on_ranks;
use pstate::{Bf16, DType, InitOptions, PState, Status, Tensor, F16};
use std::time::Duration;

fn init() -> PState {
    PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).expect("init")
}

/// The dict group rank `from` sends.
fn dict_of(from: usize) -> Vec<Tensor> {
    let f = from as f32;
    let big: Vec<f64> = (0..20000).map(|i| (from * 1_000_000 + i) as f64).collect(); // 160 kB
    vec![
        Tensor::from_slice("f32", &[2, 3], &[f, f + 1.0, f + 2.0, f + 3.0, f + 4.0, f + 5.0]).unwrap(),
        Tensor::from_slice("i64 scalar", &[], &[-7 - from as i64]).unwrap(),
        Tensor::from_slice::<u8>("empty", &[0, 4], &[]).unwrap(),
        Tensor::from_slice("i8", &[4], &[-1i8, from as i8, 3, -128]).unwrap(),
        Tensor::from_slice("u32", &[2, 1], &[from as u32, u32::MAX]).unwrap(),
        Tensor::from_slice("u64", &[1], &[(from as u64) << 40]).unwrap(),
        Tensor::from_slice("i32", &[1, 1, 2], &[from as i32, -(from as i32)]).unwrap(),
        Tensor::from_slice("f16", &[2], &[F16(0x3c00), F16(0x4000 + from as u16)]).unwrap(),
        Tensor::from_slice("bf16", &[3], &[Bf16::from_f32(1.0), Bf16::from_f32(2.0), Bf16(0x4040 + from as u16)]).unwrap(),
        Tensor::new("e4m3", DType::Fp8E4M3, vec![2, 2], vec![0x38, 0x40, from as u8, 0xff]).unwrap(),
        Tensor::new("e5m2", DType::Fp8E5M2, vec![3], vec![0x3c, from as u8, 0x80]).unwrap(),
        Tensor::from_slice("big", &[100, 200], &big).unwrap(),
    ]
}

#[test]
fn tensors_convert_to_and_from_typed_values() {
    let t = Tensor::from_slice("x", &[2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!((t.dtype, t.data.len(), t.numel()), (DType::Float32, 16, Some(4)));
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(t.to_vec::<i32>().unwrap_err().status, Status::InvalidArgument);
    assert_eq!(Tensor::from_slice("y", &[3], &[1.0f32, 2.0]).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(Tensor::new("z", DType::Float32, vec![-1], vec![]).unwrap_err().status, Status::InvalidArgument);
    let q = Tensor::new("q", DType::Fp8E5M2, vec![2], vec![1, 2]).unwrap();
    assert_eq!(q.to_vec::<u8>().unwrap(), vec![1, 2]);
    assert_eq!(Tensor::from_slice("s", &[], &[5i64]).unwrap().numel(), Some(1));
}

#[test]
fn broadcast_tensor_dict_from_every_root_three_ranks() {
    on_ranks("broadcast_tensor_dict_from_every_root_three_ranks", 3, || {
        let ps = init();
        let w = ps.world().unwrap();
        let me = w.rank_in_group();
        for root in 0..w.world_size() {
            let mine = if me == root { dict_of(root) } else { Vec::new() };
            let got = w.broadcast_tensor_dict(mine, root).unwrap();
            assert_eq!(got, dict_of(root), "broadcast from {root}");
            let r = root as f32;
            assert_eq!(got[0].to_vec::<f32>().unwrap(), vec![r, r + 1.0, r + 2.0, r + 3.0, r + 4.0, r + 5.0]);
            assert_eq!(got[1].to_vec::<i64>().unwrap(), vec![-7 - root as i64]);
            assert_eq!(got[8].to_vec::<Bf16>().unwrap()[1].to_f32(), 2.0);
            assert_eq!(got[11].to_vec::<f64>().unwrap()[19999], (root * 1_000_000 + 19999) as f64);
        }
        assert!(w.broadcast_tensor_dict(Vec::new(), 0).unwrap().is_empty());
    });
}

#[test]
fn send_and_recv_tensor_dict_around_a_ring_three_ranks() {
    on_ranks("send_and_recv_tensor_dict_around_a_ring_three_ranks", 3, || {
        let ps = init();
        let w = ps.world().unwrap();
        let (n, r) = (w.world_size(), w.rank_in_group());
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        // even ranks send first, odd ranks receive first: no cycle of waiting senders
        let got = if r % 2 == 0 {
            w.send_tensor_dict(&dict_of(r), next).unwrap();
            w.recv_tensor_dict(prev).unwrap()
        } else {
            let got = w.recv_tensor_dict(prev).unwrap();
            w.send_tensor_dict(&dict_of(r), next).unwrap();
            got
        };
        assert_eq!(got, dict_of(prev));
    });
}

#[test]
fn refused_dicts_fail_every_rank_two_ranks() {
    on_ranks("refused_dicts_fail_every_rank_two_ranks", 2, || {
        let ps = init();
        let w = ps.world().unwrap();
        let src = w.rank_in_group() == 0;
        let bad: Vec<(&str, Vec<Tensor>)> = vec![
            // the binding refuses: C would read past the data / the name is no C string
            ("short data", vec![Tensor { name: "x".into(), dtype: DType::Float32, shape: vec![4], data: vec![0; 8] }]),
            ("NUL name", vec![Tensor { name: "a\0b".into(), dtype: DType::Uint8, shape: vec![1], data: vec![1] }]),
            ("negative extent", vec![Tensor { name: "n".into(), dtype: DType::Float32, shape: vec![-1], data: vec![] }]),
            // the library refuses
            ("duplicate", vec![Tensor::from_slice("k", &[], &[1i32]).unwrap(), Tensor::from_slice("k", &[], &[2i32]).unwrap()]),
        ];
        for (what, dict) in bad {
            let err = w.broadcast_tensor_dict(if src { dict } else { Vec::new() }, 0).unwrap_err();
            assert_eq!(err.status, Status::InvalidArgument, "{what}: {err}");
            assert!(src || err.detail.contains("refused its dict"), "{what}: {err}");
            // a binding's refusal reaches the receiver as its reason, clean (not the library's
            // refusal of the stand-in dict the sender sent)
            let by_binding = what != "duplicate";
            assert!(
                src || !by_binding
                    || (err.detail.contains("its Rust binding refused it") && !err.detail.contains("dtype -1") && !err.detail.contains("pstate_")),
                "{what}: {err}"
            );
        }
        // a bad rank is refused locally on every rank; so is sending to oneself
        assert_eq!(w.broadcast_tensor_dict(Vec::new(), 7).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(w.send_tensor_dict(&[], w.rank_in_group()).unwrap_err().status, Status::InvalidArgument);
        // the group is still in step
        let got = w.broadcast_tensor_dict(if src { dict_of(0) } else { Vec::new() }, 0).unwrap();
        assert_eq!(got, dict_of(0));
    });
}
