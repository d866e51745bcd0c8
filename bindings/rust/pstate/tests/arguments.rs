//! What a new user meets: zero parallel sizes are the defaults (pstate.h's rule for every front
//! end), `PState::rank()` / `world_size()`, the library's messages in Rust names, and an
//! `InterruptHandle` that stops a blocked call.
mod common;

use common::on_ranks;
use pstate::{GroupKind, InitOptions, Layout, PState, ParallelConfig, Status};
use std::time::{Duration, Instant};

fn one_rank(dir: &std::path::Path) -> PState {
    PState::init(&InitOptions {
        world_size: Some(1),
        rank: Some(0),
        init_method: Some(format!("file://{}", dir.join("store").display())),
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    })
    .expect("init a world of one")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pstate-rs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn zero_parallel_sizes_are_the_defaults() {
    let explicit = Layout::new(4, &ParallelConfig { tensor_parallel: 2, pipeline_parallel: 2, ..Default::default() }).unwrap();
    // before: "world_size 4 != tensor_parallel_size 1 x pipeline_parallel_size 2"
    let given = Layout::new(4, &ParallelConfig { pipeline_parallel: 2, ..Default::default() }).unwrap();
    for kind in GroupKind::ALL {
        assert_eq!(given.groups(kind).unwrap(), explicit.groups(kind).unwrap(), "{kind:?}");
    }
    assert_eq!(Layout::new(8, &ParallelConfig::default()).unwrap().groups(GroupKind::Tp).unwrap(), vec![(0..8).collect::<Vec<_>>()]);
    let err = Layout::new(6, &ParallelConfig { pipeline_parallel: 4, ..Default::default() }).err().unwrap();
    assert!(err.detail.contains("world_size 6 is not divisible by pipeline_parallel_size 4"), "{err}");
}

#[test]
fn rank_and_world_size_of_a_pstate() {
    let dir = temp_dir("rank");
    let ps = one_rank(&dir);
    assert_eq!((ps.rank(), ps.world_size()), (0, 1));
    ps.finalize().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn messages_name_rust_calls() {
    let dir = temp_dir("messages");
    let ps = one_rank(&dir);
    let err = ps.group(GroupKind::Tp).err().unwrap();
    assert_eq!(err.status, Status::InvalidState);
    assert!(err.detail.contains("call PState::initialize_model_parallel first"), "{err}");
    assert!(!err.detail.contains("pstate_"), "{err}");
    ps.finalize().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// Every message names its call once, in Rust names (before: "new_group: new_group: ...",
/// "PSTATE_GROUP_CUSTOM", binding messages without the call: "dst 18446744073709551615 is not a
/// rank", "recv holds 1 elements, the operation needs 2").
#[test]
fn messages_name_the_call_once_in_rust_names() {
    let dir = temp_dir("once");
    let ps = one_rank(&dir);
    let once = |err: &pstate::Error, call: &str, has: &str| {
        assert!(err.detail.starts_with(&format!("{call}: ")) && err.detail.contains(has), "{err}");
        assert_eq!(err.detail.matches(call).count(), 1, "{err}");
        assert!(!err.detail.contains("pstate_") && !err.detail.contains("PSTATE_GROUP"), "{err}");
    };
    let err = ps.group(GroupKind::Custom).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    once(&err, "PState::group", "GroupKind::Custom is not a kind of the layout: a custom group is the Group that PState::new_group returned");
    let err = ps.new_group(&[0, 0]).err().unwrap();
    once(&err, "PState::new_group", "");
    let w = ps.world().unwrap();
    once(&w.broadcast(&mut [1f32], usize::MAX).err().unwrap(), "broadcast on world:0", "src 18446744073709551615 is not a rank");
    once(&w.all_gather(&[1f32, 2.0], &mut [0f32; 1]).err().unwrap(), "all_gather on world:0", "recv holds 1 elements, 2 needed");
    once(&w.gather(&[1f32], None, 0).err().unwrap(), "gather on world:0", "recv is None on dst (group rank 0), which needs Some of 1 elements");
    once(&pstate::Tensor::new("x", pstate::DType::Float32, vec![2], vec![0; 3]).err().unwrap(), "Tensor::new", "tensor 'x': data holds 3 bytes");
    drop(w);
    ps.finalize().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// Rank 0 blocks in recv from rank 1, which never sends; a thread interrupts it 0.5 s in. recv
/// returns Status::Interrupted within a second, the PState is failed (Aborted naming the
/// interruption and PState::abort), abort frees it. Rank 1 waits for rank 0's verdict, then aborts.
#[test]
fn interrupt_handle_stops_a_blocked_call_two_ranks() {
    on_ranks("interrupt_handle_stops_a_blocked_call_two_ranks", 2, || {
        let ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).unwrap();
        let verdict = std::env::temp_dir().join(format!("pstate-rs-interrupt-{}", std::env::var("MASTER_PORT").unwrap()));
        if ps.rank() == 1 {
            let end = Instant::now() + Duration::from_secs(30);
            while !verdict.exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            ps.abort().unwrap();
            assert!(verdict.exists(), "rank 0 gave no verdict");
            let _ = std::fs::remove_file(&verdict);
            return;
        }
        let handle = ps.interrupt_handle();
        let interrupter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            handle.interrupt();
            Instant::now()
        });
        let mut buf = [0f32; 4];
        let world = ps.world().unwrap();
        let err = world.recv(&mut buf, 1).err().expect("recv returned although rank 1 never sent");
        let took = interrupter.join().unwrap().elapsed();
        println!("INTERRUPTED recv after {} ms", took.as_millis());
        assert_eq!(err.status, Status::Interrupted, "{err}");
        assert!(err.detail.contains("interrupted") && err.detail.contains("PState::abort"), "{err}");
        assert!(took < Duration::from_secs(1), "recv returned {took:?} after interrupt()");
        let after = world.barrier().err().unwrap();
        assert_eq!(after.status, Status::Aborted, "{after}");
        assert!(after.detail.contains("interrupted") && after.detail.contains("PState::abort"), "{after}");
        drop(world);
        let late = ps.interrupt_handle();
        ps.abort().unwrap();
        late.interrupt(); // after abort: nothing to stop, and no crash
        std::fs::write(&verdict, format!("{took:?}")).unwrap();
    });
}

/// A watchdog thread holding an AbortHandle stops the recv rank 0 is blocked in (rank 1 never
/// sends): recv returns Status::Aborted naming the abort, later calls are Aborted too, and the
/// owning thread frees the PState with abort(). The handle does nothing once the PState is gone.
#[test]
fn abort_handle_stops_a_blocked_call_from_a_watchdog_thread_two_ranks() {
    on_ranks("abort_handle_stops_a_blocked_call_from_a_watchdog_thread_two_ranks", 2, || {
        let ps = PState::init(&InitOptions { timeout: Some(Duration::from_secs(60)), ..Default::default() }).unwrap();
        let verdict = std::env::temp_dir().join(format!("pstate-rs-abort-{}", std::env::var("MASTER_PORT").unwrap()));
        if ps.rank() == 1 {
            let end = Instant::now() + Duration::from_secs(30);
            while !verdict.exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            ps.abort().unwrap();
            assert!(verdict.exists(), "rank 0 gave no verdict");
            let _ = std::fs::remove_file(&verdict);
            return;
        }
        let handle = ps.abort_handle();
        let watchdog = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            handle.abort().unwrap();
            (Instant::now(), handle)
        });
        let mut buf = [0f32; 4];
        let world = ps.world().unwrap();
        let err = world.recv(&mut buf, 1).err().expect("recv returned although rank 1 never sent");
        let (fired, handle) = watchdog.join().unwrap();
        let took = fired.elapsed();
        println!("ABORTED recv {} ms after AbortHandle::abort", took.as_millis());
        assert_eq!(err.status, Status::Aborted, "{err}");
        assert!(err.detail.contains("another thread"), "{err}");
        assert!(took < Duration::from_secs(10), "recv returned {took:?} after the abort");
        let after = world.barrier().err().unwrap();
        assert_eq!(after.status, Status::Aborted, "{after}");
        drop(world);
        ps.abort().unwrap();
        handle.abort().unwrap(); // after the PState is gone: nothing to stop, and no crash
        std::fs::write(&verdict, format!("{took:?}")).unwrap();
    });
}

#[test]
fn trace_dump_writes_this_ranks_flight_recorder() {
    let dir = temp_dir("trace");
    let ps = one_rank(&dir);
    let file = dir.join("dump.txt");
    ps.trace_dump(Some(file.to_str().unwrap())).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("pstate-trace 1\n") && text.ends_with("\nend\n"), "{text}");
    assert!(text.contains("\nreason pstate_trace_dump\n") && text.contains("\ngroup 0 world:0 1 0 0 "), "{text}");
    let err = ps.trace_dump(Some("/proc/no-such-dir/x")).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.detail.contains("/proc/no-such-dir/x"), "{err}");
    ps.finalize().unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// A group's own timeout (issue 43): the context's at first, the group's after `set_timeout`, the
/// context's again after `None`. The C suite (tests/api/test_group_timeout.c) shows it ending a
/// stalled call at the group's 200 ms.
#[test]
fn group_timeout_set_and_read() {
    let dir = temp_dir("group-timeout");
    let ps = one_rank(&dir);
    let w = ps.group(GroupKind::World).unwrap();
    assert_eq!(w.timeout().unwrap(), Duration::from_secs(10));
    w.set_timeout(Some(Duration::from_millis(250))).unwrap();
    assert_eq!(w.timeout().unwrap(), Duration::from_millis(250));
    w.barrier().unwrap();
    w.set_timeout(None).unwrap();
    assert_eq!(w.timeout().unwrap(), Duration::from_secs(10));
    drop(w);
    ps.finalize().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
