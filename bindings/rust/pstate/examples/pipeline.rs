//! pipeline — requests between two pipeline stages: run it with
//!
//!     pstate run -n 2 -- target/debug/examples/pipeline
//!
//! Stage 0 sends each step's activations with an owned `isend`, stage 1 receives them with an
//! owned `irecv`: the request holds the Vec while the library uses it and `wait` gives it back,
//! so one allocation serves every step. Then the stages swap one value through a scope, whose
//! requests borrow two halves of one array and are complete when the scope returns.
use pstate::{GroupKind, InitOptions, PState, ParallelConfig};

fn main() -> pstate::Result<()> {
    let mut ps = PState::init(&InitOptions::default())?;
    ps.initialize_model_parallel(&ParallelConfig { pipeline_parallel: 2, ..Default::default() })?;
    {
        let pp = ps.group(GroupKind::Pp)?;
        let (stage, peer) = (pp.rank_in_group(), 1 - pp.rank_in_group());
        let mut hidden = vec![0f32; 1024]; // one allocation for every step
        for step in 0..3 {
            if stage == 0 {
                hidden.fill(step as f32);
                hidden = pp.isend(hidden, peer)?.wait()?; // owned by the request until sent
            } else {
                let req = pp.irecv(hidden, peer)?; // posted; other work could run here
                hidden = req.wait()?; // the same Vec, filled
                assert!(hidden.iter().all(|&x| x == step as f32));
            }
        }
        let mut swap = [10 + stage as i32, 0]; // [mine, the peer's]
        let (mine, theirs) = swap.split_at_mut(1);
        pstate::scope(|s| {
            s.isend(&pp, mine, peer)?;
            s.irecv(&pp, theirs, peer)?; // no handle kept: the scope completes both
            Ok(())
        })?;
        println!("stage {stage}/2: 3 steps of {} activations, swap {swap:?}", hidden.len());
    }
    ps.finalize()
}
