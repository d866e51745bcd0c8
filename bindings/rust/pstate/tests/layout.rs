//! Layout, enums and error mapping without communication: pstate::Layout against an independent
//! computation of SGLang's TP x PP formulas.
use pstate::{DType, Engine, GroupKind, Layout, ParallelConfig, Status};

fn sglang_tp_pp(world: usize, tp: usize) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let tp_groups = (0..world / tp).map(|i| (i * tp..(i + 1) * tp).collect()).collect();
    let pp_groups = (0..tp).map(|i| (i..world).step_by(tp).collect()).collect();
    (tp_groups, pp_groups)
}

#[test]
fn layout_tp_pp_groups_match_sglang() {
    for (world, tp, pp) in [(8, 4, 2), (8, 2, 4), (4, 2, 2), (6, 3, 2), (1, 1, 1)] {
        let cfg = ParallelConfig { tensor_parallel: tp, pipeline_parallel: pp, ..Default::default() };
        let l = Layout::new(world, &cfg).unwrap();
        let (want_tp, want_pp) = sglang_tp_pp(world, tp);
        assert_eq!(l.groups(GroupKind::Tp).unwrap(), want_tp, "world {world} tp {tp}");
        assert_eq!(l.groups(GroupKind::Pp).unwrap(), want_pp, "world {world} tp {tp}");
        for r in 0..world {
            assert_eq!(l.group_of(GroupKind::Tp, r).unwrap(), r / tp);
        }
    }
}

/// vLLM's initialize_model_parallel computed independently: rank r is (e, d, p, c, t) in
/// arange(world).reshape(-1, dp, pp, pcp, tp); a kind's group holds the ranks that agree with r on
/// every coordinate the kind fixes, and the groups are listed by the fixed coordinates in the
/// order its transpose leaves them (pcp: e d p t; pp: e d t c; dp: e t p c; ep: e p).
fn vllm_groups(world: usize, tp: usize, pp: usize, dp: usize, pcp: usize, kind: GroupKind) -> Vec<Vec<usize>> {
    let coords = |r: usize| [r / tp / pcp / pp / dp, r / tp / pcp / pp % dp, r / tp / pcp % pp, r / tp % pcp, r % tp];
    // (the coordinates a group fixes, in its listing order)
    let fixed: &[usize] = match kind {
        GroupKind::Tp => &[0, 1, 2, 3],
        GroupKind::Pcp => &[0, 1, 2, 4],
        GroupKind::Pp => &[0, 1, 4, 3],
        GroupKind::Dp => &[0, 4, 2, 3],
        GroupKind::Ep | GroupKind::Eplb => &[0, 2],
        _ => unreachable!(),
    };
    let key = |r: usize| fixed.iter().map(|&a| coords(r)[a]).collect::<Vec<_>>();
    let mut keys: Vec<Vec<usize>> = (0..world).map(key).collect();
    keys.sort();
    keys.dedup();
    keys.iter().map(|k| (0..world).filter(|&r| &key(r) == k).collect()).collect()
}

#[test]
fn layout_vllm_engine_matches_vllms_grid() {
    for (world, tp, pp, dp, pcp) in [(8, 2, 2, 2, 1), (8, 2, 2, 1, 2), (16, 2, 2, 2, 2), (12, 2, 1, 2, 1), (8, 2, 4, 1, 1)] {
        let cfg = ParallelConfig {
            engine: Engine::Vllm,
            tensor_parallel: tp,
            pipeline_parallel: pp,
            data_parallel: dp,
            prefill_context_parallel: pcp,
            moe_model: true,
            ..Default::default()
        };
        let l = Layout::new(world, &cfg).unwrap();
        for kind in [GroupKind::Tp, GroupKind::Pcp, GroupKind::Pp, GroupKind::Dp, GroupKind::Ep, GroupKind::Eplb] {
            assert_eq!(l.groups(kind).unwrap(), vllm_groups(world, tp, pp, dp, pcp, kind), "{kind:?} of world {world}");
        }
        assert_eq!(l.group_count(GroupKind::AttnTp).unwrap(), 0, "SGLang's kinds are not in vLLM's layout");
    }
    assert_eq!(GroupKind::ALL.len(), pstate_sys::PSTATE_GROUP_KIND_COUNT as usize);
    assert_eq!((Engine::Vllm.name(), Engine::default()), ("vllm", Engine::Sglang));
}

#[test]
fn layout_vllm_refusals_name_the_sizes() {
    let cfg = ParallelConfig { engine: Engine::Vllm, tensor_parallel: 2, pipeline_parallel: 2, data_parallel: 2, ..Default::default() };
    let err = Layout::new(12, &cfg).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.detail.contains("world_size 12 is not divisible by data_parallel_size 2"), "{err}");
    let err = Layout::new(4, &ParallelConfig { data_parallel: 2, ..Default::default() }).err().unwrap();
    assert!(err.detail.contains("a size of vLLM's layout"), "{err}");
}

#[test]
fn layout_rejects_world_not_tp_times_pp_with_library_text() {
    let err = Layout::new(6, &ParallelConfig { tensor_parallel: 4, ..Default::default() }).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.detail.contains("tp x pp"), "{err}");
    // the status as text, then the operation once, in Rust names
    assert!(err.to_string().starts_with("invalid argument: Layout::new: "), "{err}");
}

/// Status reads as text (before: no Display; an error printed the C name in front).
#[test]
fn status_displays_as_text_and_keeps_its_c_name() {
    let texts: Vec<String> = (1..=13).map(|n| Status::from_raw(n).unwrap().to_string()).collect();
    assert_eq!(
        texts,
        [
            "invalid argument", "invalid state", "unsupported", "out of memory", "timeout", "peer lost", "transport error",
            "mismatch", "authentication failed", "aborted", "internal error", "interrupted", "busy"
        ]
    );
    assert_eq!(Status::Unknown(42).to_string(), "unknown status 42");
    assert_eq!(Status::NotLoaded.to_string(), "libpstate not loaded");
    assert_eq!((Status::Busy.name(), Status::NotLoaded.name(), Status::NotLoaded.raw()), ("PSTATE_ERR_BUSY", "PSTATE_ERR_UNSUPPORTED", 3));
}

#[test]
fn layout_is_shared_across_threads() {
    let l = std::sync::Arc::new(Layout::new(8, &ParallelConfig { tensor_parallel: 8, expert_parallel: 4, ..Default::default() }).unwrap());
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || l.groups(GroupKind::MoeEp).unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
    }
}

#[test]
fn dtype_sizes_and_names_come_from_the_library() {
    assert_eq!(DType::Float32.size(), 4);
    assert_eq!(DType::BFloat16.size(), 2);
    assert_eq!(DType::Fp8E5M2.size(), 1);
    assert_eq!(GroupKind::SharedExpertsTp.name(), "shared_experts_tp");
    assert_eq!(Status::Timeout.name(), "PSTATE_ERR_TIMEOUT");
    assert_eq!(Status::from_raw(6), Some(Status::PeerLost));
    assert_eq!(Status::from_raw(0), None);
    assert_eq!(Status::from_raw(99), Some(Status::Unknown(99)));
    assert_eq!(pstate::library_version(), 10000); // 1.0.0
}
