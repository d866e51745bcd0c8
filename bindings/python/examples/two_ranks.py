"""two_ranks.py — the Python binding in one screen: run it with

    pstate run -n 2 -- python3 bindings/python/examples/two_ranks.py

Each rank joins the job (RANK, WORLD_SIZE, MASTER_ADDR/PORT come from `pstate run`), makes a
tensor-parallel group of both ranks, sums a numpy array across it and receives a config object
from rank 0.
"""
import numpy as np

import pstate

with pstate.init() as ps:  # finalize on exit, abort if the block raises
    ps.initialize_model_parallel(tensor_parallel_size=2)
    tp = ps.tp
    x = np.full(4, ps.rank + 1, dtype=np.float32)
    tp.all_reduce(x)  # in place, GIL released while it runs
    cfg = tp.broadcast_object({"model": "llama", "max_tokens": 128} if tp.rank_in_group == 0 else None, src=0)
    print(f"rank {ps.rank}/{ps.world_size} tp {tp.name} ranks {tp.ranks}: all_reduce -> {x.tolist()}, config {cfg}")
    assert x.tolist() == [3.0] * 4 and cfg["max_tokens"] == 128
