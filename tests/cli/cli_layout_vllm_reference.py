#!/usr/bin/python3
"""cli_layout_vllm_reference.py — `pstate layout --engine vllm` against vLLM's own formula.

`vllm_groups` computes the groups of vLLM's initialize_model_parallel (vllm/distributed/
parallel_state.py) the way vLLM writes them, with numpy in place of torch and without pstate:

    all_ranks = arange(world).reshape(-1, dp, pp, pcp, tp)        # ExternalDP x DP x PP x PCP x TP
    tp   = all_ranks.reshape(-1, tp)                               # view(-1, tp).unbind(0)
    dcp  = all_ranks.reshape(-1, dcp)                              # when dcp > 1
    pcp  = all_ranks.transpose(3, 4).reshape(-1, pcp)
    pp   = all_ranks.transpose(2, 4).reshape(-1, pp)
    dp   = all_ranks.transpose(1, 4).reshape(-1, dp)
    ep   = all_ranks.transpose(1, 2).reshape(-1, dp * pcp * tp)   # MoE models only
    eplb = ep's rank lists                                         # MoE models only

(numpy's swapaxes is torch's transpose, and a reshape of a transposed array reads it in its new
axis order, as torch's does.) The modes, one ctest each (tests/cli/cli_layout.cmake):

  json     every configuration with world <= 64 (every tp, pp, dp, pcp whose product divides the
           world, every dcp dividing tp, dense and MoE: 13312 layouts) through one
           `pstate layout --batch` process, plus curated cases through single `--json` runs (vLLM's
           docstring example, defaults of omitted sizes); each answer must equal the reference,
           lists and their order included.
  errors   what vLLM refuses (a world that is not whole dp x pp x pcp x tp replicas, dcp not
           dividing tp), sizes of the other engine, and bad --engine/--batch use exit 2 with the
           reason on stderr (or, in --batch, an {"error": ...} line) and nothing on stdout.

usage: cli_layout_vllm_reference.py PATH/TO/pstate MODE
"""
import json
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:  # python3-numpy is in build.sh's packages; without it the test is skipped, not failed
    print("numpy is not installed: skipped")
    sys.exit(77)


def vllm_groups(world, tp=1, pp=1, dp=1, pcp=1, dcp=1, moe=False):
    """{kind name: list of rank lists} for every kind vLLM creates (dcp only when > 1)."""
    all_ranks = np.arange(world).reshape(-1, dp, pp, pcp, tp)

    def rows(a, size):
        return a.reshape(-1, size).tolist()

    g = {"world": [list(range(world))], "tp": rows(all_ranks, tp)}
    if dcp > 1:
        g["dcp"] = rows(all_ranks, dcp)
    g["pcp"] = rows(all_ranks.swapaxes(3, 4), pcp)
    g["pp"] = rows(all_ranks.swapaxes(2, 4), pp)
    g["dp"] = rows(all_ranks.swapaxes(1, 4), dp)
    if moe:
        g["ep"] = rows(all_ranks.swapaxes(1, 2), dp * pcp * tp)
        g["eplb"] = [list(r) for r in g["ep"]]
    return g


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def all_valid_configs(max_world):
    for world in range(1, max_world + 1):
        for tp in divisors(world):
            for pp in divisors(world // tp):
                for dp in divisors(world // tp // pp):
                    for pcp in divisors(world // tp // pp // dp):
                        for dcp in divisors(tp):
                            for moe in (False, True):
                                yield world, dict(tp=tp, pp=pp, dp=dp, pcp=pcp, dcp=dcp, moe=moe)


def layout_args(world, **cfg):
    args = ["--engine", "vllm", "--world", str(world)]
    for key, value in cfg.items():
        if key == "moe":
            args += ["--moe"] if value else []
        else:
            args += [f"--{key}", str(value)]
    return args


def run(pstate, *args, stdin=None):
    return subprocess.run([pstate, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120)


# (world, options given, the explicit config they mean)
CURATED = [
    # vLLM's docstring: 8 GPUs, tp 2, pp 4 -> tp [g0,g1]..., pp [g0,g2,g4,g6], [g1,g3,g5,g7]
    (8, dict(tp=2, pp=4), dict(tp=2, pp=4)),
    (8, dict(tp=2, pp=2, dp=2, moe=True), dict(tp=2, pp=2, dp=2, moe=True)),     # the multi-rank test's
    (16, dict(tp=2, pp=2, dp=2, pcp=2, dcp=2, moe=True), dict(tp=2, pp=2, dp=2, pcp=2, dcp=2, moe=True)),
    (24, dict(tp=2, pp=2, dp=2), dict(tp=2, pp=2, dp=2)),                          # ExternalDP 3
    (8, dict(), dict(tp=8)),                                                       # defaults: tp = world
    (8, dict(dp=2), dict(tp=4, dp=2)),                                             # tp = world / (dp pp pcp)
    (12, dict(tp=0, pp=3, dp=0, pcp=2, dcp=0), dict(tp=2, pp=3, pcp=2)),
]


def check_json(pstate):
    ok = True
    # the curated cases, one process each (the single-configuration path)
    for world, given, meant in CURATED:
        r = run(pstate, "layout", *layout_args(world, **given), "--json")
        want = {"world_size": world, "groups": vllm_groups(world, **meant)}
        try:
            got = json.loads(r.stdout)
        except json.JSONDecodeError as e:
            got = f"not one JSON object ({e}): {r.stdout[:200]!r}"
        if r.returncode != 0 or got != want:
            ok = False
            print(f"FAIL world {world} {given}: exit {r.returncode}, stderr {r.stderr.strip()!r}\n"
                  f"  got  {got}\n  want {want}")
    print(f"json: {len(CURATED)} curated layouts checked")

    # every configuration up to world 64, one --batch process
    start = time.monotonic()
    configs = list(all_valid_configs(64))
    lines = "".join(" ".join(layout_args(world, **cfg)) + "\n" for world, cfg in configs)
    r = run(pstate, "layout", "--batch", stdin=lines)
    answers = r.stdout.splitlines()
    if r.returncode != 0 or len(answers) != len(configs):
        print(f"FAIL --batch: exit {r.returncode}, {len(answers)} answers for {len(configs)} lines, "
              f"stderr {r.stderr[:300]!r}")
        return False
    failures = 0
    for (world, cfg), answer in zip(configs, answers):
        want = {"world_size": world, "groups": vllm_groups(world, **cfg)}
        got = json.loads(answer)
        if got != want:
            failures += 1
            if failures <= 5:
                print(f"FAIL world {world} {cfg}:\n  got  {got}\n  want {want}")
    print(f"json: {len(configs) - failures} of {len(configs)} layouts (world <= 64) match vLLM's formula "
          f"({time.monotonic() - start:.1f} s)")
    return ok and failures == 0


def check_errors(pstate):
    def layout(world, **cfg):
        return ["layout", *layout_args(world, **cfg)]

    cases = [
        (layout(12, tp=2, pp=2, dp=2), "world_size 12 is not divisible by data_parallel_size 2"),
        (layout(8, tp=4, pp=1, dp=1, pcp=4), "is not divisible by data_parallel_size 1"),
        (layout(8, tp=4, pp=2, dcp=3), "tensor_parallel_size 4 is not divisible by decode_context_parallel_size 3"),
        (layout(6, pp=4), "world_size 6 is not divisible by data_parallel_size 1 x pipeline_parallel_size 4"),
        (layout(8, tp=8, dp=-1), "data_parallel_size is -1"),
        (layout(8, tp=8, pcp=-2), "prefill_context_parallel_size is -2"),
        (layout(0), "world_size is 0"),
        (layout(8, tp=65536, pp=65536), "overflows int"),
        (layout(8, tp=8) + ["--ep", "2"], "expert_parallel_size is 2: a size of SGLang's layout"),
        (layout(8, tp=8) + ["--attn-dp", "2"], "attention_data_parallel_size is 2"),
        (layout(8, tp=8) + ["--shared-experts-tp", "2"], "shared_experts_tensor_parallel_size is 2"),
        (["layout", "--world", "8", "--tp", "4", "--dp", "2"], "data_parallel_size is 2: a size of vLLM's layout"),
        (["layout", "--world", "8", "--tp", "4", "--pcp", "2"], "prefill_context_parallel_size is 2"),
        (["layout", "--engine", "trtllm", "--world", "8"], "--engine must be sglang or vllm"),
        (["layout", "--batch", "--world", "8"], "--world belongs on its lines"),
    ]
    ok = True
    for args, needle in cases:
        r = run(pstate, *args)
        if r.returncode != 2 or needle not in r.stderr or r.stdout:
            ok = False
            print(f"FAIL pstate {' '.join(map(str, args))}: exit {r.returncode} (want 2), "
                  f"stderr {r.stderr!r} (want {needle!r}), stdout {r.stdout[:100]!r}")

    # --batch: one answer per line, errors as {"error": ...}, exit 2 when any line was refused
    lines = ["--engine vllm --world 4 --tp 2", "# a comment", "", "--engine vllm --world 6 --tp 4",
             "--world 4 --bogus 1", "--engine vllm --world 4 --tp 2 --batch", "--engine vllm --world 2 --moe"]
    r = run(pstate, "layout", "--batch", stdin="\n".join(lines) + "\n")
    answers = [json.loads(a) for a in r.stdout.splitlines()]
    want_errors = [None, "world_size 6 is not divisible", "unknown option --bogus", "not options of a batch line", None]
    good = r.returncode == 2 and len(answers) == len(want_errors)
    for answer, needle in zip(answers, want_errors):
        if needle is None:
            good &= "groups" in answer
        else:
            good &= needle in answer.get("error", "")
    if not good or answers[0] != {"world_size": 4, "groups": vllm_groups(4, tp=2)}:
        ok = False
        print(f"FAIL --batch errors: exit {r.returncode}, answers {answers}")
    print(f"errors: {len(cases) + 1} cases checked")
    return ok


if __name__ == "__main__":
    pstate_bin, mode = sys.argv[1], sys.argv[2]
    checks = {"json": check_json, "errors": check_errors}
    sys.exit(0 if checks[mode](pstate_bin) else 1)
