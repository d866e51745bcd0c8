//! Group memory (issue 29): the CPU context's refusal, and the allocator on the devsim stand-ins
//! (a world of one: plain memory, the fallback; the pool; drop frees) where they were built in
//! the build tree ($PSTATE_BUILD_DIR/tests/devsim); without them that part says it is skipped.
use pstate::{Device, GroupKind, InitOptions, MemKind, PState, Status};
use std::time::Duration;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pstate-rs-mem-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn init(dir: &std::path::Path, device: Device) -> PState {
    PState::init(&InitOptions {
        world_size: Some(1),
        rank: Some(0),
        init_method: Some(format!("file://{}", dir.join("store").display())),
        timeout: Some(Duration::from_secs(10)),
        device,
        ..Default::default()
    })
    .expect("init a world of one")
}

#[test]
fn group_memory_needs_a_cuda_context() {
    let dir = temp_dir("cpu");
    let ps = init(&dir, Device::Cpu);
    let w = ps.group(GroupKind::World).unwrap();
    let err = w.mem_alloc(4096).err().unwrap();
    assert_eq!(err.status, Status::Unsupported, "{err}");
    assert!(err.detail.contains("CUDA context"), "{err}");
    assert_eq!(w.mem_stats().err().unwrap().status, Status::Unsupported);
    assert_eq!(w.mem_alloc(0).err().unwrap().status, Status::InvalidArgument);
    ps.set_graph_registration(true).unwrap();
    drop(w);
    ps.finalize().unwrap();
}

#[test]
fn group_memory_on_devsim_world_of_one_is_freed_on_drop() {
    let build = std::env::var("PSTATE_BUILD_DIR").unwrap_or_default();
    let cudart = std::path::Path::new(&build).join("tests/devsim/libpstate_devsim_cudart.so");
    if build.is_empty() || !cudart.exists() {
        eprintln!("skipped: the devsim stand-ins are not built (PSTATE_BUILD_DIR/tests/devsim)");
        return;
    }
    std::env::set_var("PSTATE_CUDA_RUNTIME_LIBRARY", &cudart);
    let dir = temp_dir("devsim");
    let ps = init(&dir, Device::Cuda);
    let w = ps.group(GroupKind::World).unwrap();
    {
        let m = w.mem_alloc(4096).unwrap();
        let info = w.mem_query(m.as_ptr().cast()).unwrap();
        assert!(info.kind == MemKind::Group && info.base == m.as_ptr() && !info.symmetric && !m.pooled(), "{info:?}");
        assert_eq!(w.mem_stats().unwrap().allocated, 4096);
    } // dropped: freed
    assert_eq!(w.mem_stats().unwrap().allocated, 0);
    w.mem_pool_reserve(8192).unwrap();
    let p = w.mem_alloc(100).unwrap();
    assert!(p.pooled());
    assert_eq!(w.mem_alloc(1 << 20).err().unwrap().status, Status::NoMemory);
    p.free().unwrap();
    drop(w);
    ps.finalize().unwrap();
}
