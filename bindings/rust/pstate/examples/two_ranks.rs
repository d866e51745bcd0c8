//! two_ranks — the Rust binding in one screen: run it with
//!
//!     pstate run -n 2 -- target/debug/examples/two_ranks
//!
//! Each rank joins the job (RANK, WORLD_SIZE, MASTER_ADDR/PORT come from `pstate run`), makes a
//! tensor-parallel group of both ranks, sums a slice across it and receives bytes from rank 0.
use pstate::{GroupKind, InitOptions, PState, ParallelConfig, ReduceOp};

fn main() -> pstate::Result<()> {
    let mut ps = PState::init(&InitOptions::default())?;
    ps.initialize_model_parallel(&ParallelConfig { tensor_parallel: 2, ..Default::default() })?;
    {
        let tp = ps.group(GroupKind::Tp)?; // borrows ps: cannot outlive it
        let mut x = vec![(ps.rank() + 1) as f32; 4];
        tp.all_reduce(&mut x, ReduceOp::Sum)?;
        let cfg = tp.broadcast_object(b"model=llama max_tokens=128", 0)?;
        let (rank, world, name, ranks) = (ps.rank(), ps.world_size(), tp.name(), tp.ranks()?);
        println!("rank {rank}/{world} tp {name} ranks {ranks:?}: all_reduce -> {x:?}, config {}", String::from_utf8_lossy(&cfg));
        assert_eq!(x, vec![3.0; 4]);
    }
    ps.finalize()
}
