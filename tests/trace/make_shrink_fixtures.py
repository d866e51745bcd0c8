#!/usr/bin/python3
# make_shrink_fixtures.py FIXTURES_DIR — writes the hand-designed dumps of a job that shrank
# (fixtures shrink-behind, shrink-stale, shrink-recovered, grow-recovered; their verdicts, worked out from this
# design, are in doctor_fixtures.sh). Kept so that the design can be read and the files remade;
# the files are committed, the test does not run this.
import os, sys
root = sys.argv[1]
B = 1700000100_000_000_000
def t(s): return str(B + int(round(s * 1e9)))
def entries(rank, new_tp_done, tail):
    # epoch 0: init, world barrier, tp all_reduce #0-#2 OK, #3 PEER_LOST (rank 2 died)
    e = [("life", "-", "-", "init", "-", "-", "-", "completed", "OK", 0.0, 0.01),
         ("coll", "0", "0", "barrier", "-", "-", "-", "completed", "OK", 0.1, 0.11)]
    for s in range(3):
        e.append(("coll", "1", str(s), "all_reduce", "4", "float32", "sum", "completed", "OK", 1.0 + s / 2, 1.01 + s / 2))
    e.append(("coll", "1", "3", "all_reduce", "4", "float32", "sum", "failed", "PEER_LOST", 2.5, 2.6))
    if new_tp_done is None:
        return e
    # epoch 1: shrink, initialize_model_parallel, tp (0,1,3) all_reduce #0.. OK
    e.append(("life", "-", "-", "shrink", "-", "-", "-", "completed", "OK", 2.7, 2.8))
    e.append(("life", "-", "-", "initialize_model_parallel", "-", "-", "-", "completed", "OK", 2.9, 2.95))
    for s in range(new_tp_done):
        e.append(("coll", "3", str(s), "all_reduce", "4", "float32", "sum", "completed", "OK", 3.0 + s / 2, 3.01 + s / 2))
    e += tail
    return e
def write(folder, job, rank, pid, reason, dumped, in_call, since, failure, epoch1, tp_new, ents):
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    lines = ["pstate-trace 1", f"job {job}", "host node0", f"pid {pid}", f"rank {rank}", "world 4", "device cpu",
             f"reason {reason}", f"dumped_unix_ns {t(dumped)}", f"in_call {in_call}",
             f"in_call_since_unix_ns {t(since) if since is not None else '-'}", f"failure {failure}",
             "capacity 4096", f"recorded {len(ents)}", "dropped 0"]
    groups = [f"group 0 world:0 4 {rank} 0,1,2,3 1", f"group 1 tp:0 4 {rank} 0,1,2,3 4"]
    if epoch1:
        lines.append("epochs 1:2")
        idx = [0, 1, None, 2][rank]
        groups += [f"group 2 world:0 3 {idx} 0,1,3 0", f"group 3 tp:0 3 {idx} 0,1,3 {tp_new}"]
    lines.append(f"groups {len(groups)}")
    lines += groups
    lines.append(f"entries {len(ents)}")
    for i, (cls, gid, seq, op, cnt, dt, ro, state, st, p, en) in enumerate(ents, 1):
        lines.append(f"e {i} {cls} {gid} {seq} {op} {cnt} {dt} {ro} - - {'-' if cls == 'life' else 'shm'} {state} "
                     f"{st if en is not None else '-'} {t(p)} {t(en) if en is not None else '-'} - -")
    lines.append("end")
    with open(os.path.join(root, folder, f"rank{rank}.pstate-trace"), "w") as f:
        f.write("\n".join(lines) + "\n")

timeout = ("coll", "3", "2", "all_reduce", "4", "float32", "sum", "failed", "TIMEOUT", 4.0, 6.0)
why = "a call failed: tp:0 rank {}: all_reduce (step 2): waiting for rank 1 to arrive at this call: timed out"
# shrink-behind: rank 2 died in tp all_reduce #3; the survivors shrank (epoch 1) and went on; rank 1
# then stayed away from the new tp's all_reduce #2 (idle since 3.51 s): ranks 0 and 3 timed out.
for r, pid, dumped in ((0, 5100, 6.01), (3, 5103, 6.02)):
    write("shrink-behind", "j-shrink", r, pid, why.format([0, 1, None, 2][r]), dumped, "pstate_all_reduce", 4.0,
          why.format([0, 1, None, 2][r])[len("a call failed: "):], True, 3, entries(r, 2, [timeout]))
write("shrink-behind", "j-shrink", 1, 5101, "SIGUSR1", 6.5, "-", None, "-", True, 2, entries(1, 2, []))
# shrink-stale: the same, but rank 1's only dump is the one of its PEER_LOST in epoch 0.
for r, pid, dumped in ((0, 5200, 6.01), (3, 5203, 6.02)):
    write("shrink-stale", "j-stale", r, pid, why.format([0, 1, None, 2][r]), dumped, "pstate_all_reduce", 4.0,
          why.format([0, 1, None, 2][r])[len("a call failed: "):], True, 3, entries(r, 2, [timeout]))
lost = "tp:0: rank 2 (pid 5202) exited while rank 1 waited for it in shared memory"
write("shrink-stale", "j-stale", 1, 5201, "a call failed: " + lost, 2.61, "pstate_all_reduce", 2.5, lost, False, 0,
      entries(1, None, []))
# shrink-recovered: after the shrink every survivor finished tp all_reduce #0-#2 and was asked
# for a dump (SIGUSR1) while idle: nothing is wrong now; rank 2's death is history.
for r, pid, dumped in ((0, 5300, 7.0), (1, 5301, 7.01), (3, 5303, 7.02)):
    write("shrink-recovered", "j-shrok", r, pid, "SIGUSR1", dumped, "-", None, "-", True, 3, entries(r, 3, []))

# grow-recovered: as shrink-recovered, then the survivors admitted a replacement for rank 2
# (pstate_grow, epoch 2: world:0 and tp:0 of ranks 0, 1, 3, 2, the replacement appended last); all
# four finished tp all_reduce #0-#1 of epoch 2 and dumped on SIGUSR1. The replacement's dump (its
# first group is of epoch 2) says nothing of the rank 2 that died in epoch 0.
def write_grow(rank, pid, dumped):
    os.makedirs(os.path.join(root, "grow-recovered"), exist_ok=True)
    order = [0, 1, 3, 2]
    idx4 = order.index(rank)
    groups, ents = [], []
    if rank != 2:
        idx3 = [0, 1, None, 2][rank]
        groups = [f"group 0 world:0 4 {rank} 0,1,2,3 1", f"group 1 tp:0 4 {rank} 0,1,2,3 4",
                  f"group 2 world:0 3 {idx3} 0,1,3 0", f"group 3 tp:0 3 {idx3} 0,1,3 3",
                  f"group 4 world:0 4 {idx4} 0,1,3,2 0", f"group 5 tp:0 4 {idx4} 0,1,3,2 2"]
        epochs = "epochs 1:2,2:4"
        ents = entries(rank, 3, [])
        ents.append(("life", "-", "-", "grow", "-", "-", "-", "completed", "OK", 5.0, 5.5))
        ents.append(("life", "-", "-", "initialize_model_parallel", "-", "-", "-", "completed", "OK", 5.6, 5.65))
        tp = "5"
    else:
        groups = [f"group 0 world:0 4 3 0,1,3,2 0", f"group 1 tp:0 4 3 0,1,3,2 2"]
        epochs = "epochs 2:0"
        ents = [("life", "-", "-", "init", "-", "-", "-", "completed", "OK", 4.9, 5.5),
                ("life", "-", "-", "initialize_model_parallel", "-", "-", "-", "completed", "OK", 5.6, 5.65)]
        tp = "1"
    for s in range(2):
        ents.append(("coll", tp, str(s), "all_reduce", "4", "float32", "sum", "completed", "OK", 6.0 + s / 2, 6.01 + s / 2))
    lines = ["pstate-trace 1", "job j-grow", "host node0", f"pid {pid}", f"rank {rank}", "world 4", "device cpu",
             "reason SIGUSR1", f"dumped_unix_ns {t(dumped)}", "in_call -", "in_call_since_unix_ns -", "failure -",
             "capacity 4096", f"recorded {len(ents)}", "dropped 0", epochs, f"groups {len(groups)}"] + groups
    lines.append(f"entries {len(ents)}")
    for i, (cls, gid, seq, op, cnt, dt, ro, state, st, p, en) in enumerate(ents, 1):
        lines.append(f"e {i} {cls} {gid} {seq} {op} {cnt} {dt} {ro} - - {'-' if cls == 'life' else 'shm'} {state} "
                     f"{st} {t(p)} {t(en)} - -")
    lines.append("end")
    with open(os.path.join(root, "grow-recovered", f"rank{rank}.pstate-trace"), "w") as f:
        f.write("\n".join(lines) + "\n")

for r, pid in ((0, 5400), (1, 5401), (2, 5502), (3, 5403)):
    write_grow(r, pid, 8.0 + r / 100)
