#!/usr/bin/python3
# tests/cli/cli_layout_reference.py: run by cli_layout_*, beside cli_layout.cmake (their list).
"""cli_layout_reference.py — checks the `pstate` command against an independent reference.

`sglang_groups` recomputes SGLang's initialize_model_parallel groups the way parallel_state.py
writes them (nested loops over tp groups, range() with strides, the same aliasing decisions),
in Python, without pstate. The modes, one ctest each (tests/cli/cli_layout.cmake):

  json     `pstate layout --json` equals the reference for SGLang's docstring cases, DESIGN.md's
           worked layouts, alias corner cases and a fixed-seed sample (300, or
           PSTATE_CLI_LAYOUT_SAMPLE) of every valid configuration with world <= 48, and for
           options omitted or 0 the reference of the defaults they mean (pstate.h: tp = world /
           pp, the others 1); the output is exactly one JSON object.
  errors   invalid configurations and bad options exit 2 with the reason on stderr, nothing on
           stdout.
  help     `pstate --help`, `--version`, and `--help` of every subcommand exit 0; `pstate info`
           runs and names the UCX version and the CUDA/NCCL state.

usage: cli_layout_reference.py PATH/TO/pstate MODE
"""
import json
import os
import random
import subprocess
import sys


def sglang_groups(world, tp=1, pp=1, ep=1, attn_dp=1, attn_cp=1, moe_dp=1, dcp=1, shared=0):
    """{kind name: list of rank lists} for every kind that exists, as SGLang builds them."""
    assert world == tp * pp
    n_tp_groups = world // tp
    attn_tp = tp // attn_dp // attn_cp
    moe_tp = tp // ep // moe_dp
    g = {"world": [list(range(world))]}
    g["tp"] = [list(range(i * tp, (i + 1) * tp)) for i in range(n_tp_groups)]
    if dcp > 1:
        g["dcp"] = [grp[s:s + dcp] for grp in g["tp"] for s in range(0, len(grp), dcp)]
    if attn_cp == tp:
        g["attn_cp"] = g["tp"]
    else:
        g["attn_cp"] = [
            list(range(i * tp + d * attn_tp * attn_cp + a, i * tp + (d + 1) * attn_tp * attn_cp + a, attn_tp))
            for i in range(n_tp_groups) for d in range(attn_dp) for a in range(attn_tp)]
    if attn_tp == tp:
        g["attn_tp"] = g["tp"]
    else:
        g["attn_tp"] = [list(range(i * tp + c * attn_tp, i * tp + (c + 1) * attn_tp))
                        for i in range(n_tp_groups) for c in range(attn_cp * attn_dp)]
    if shared and shared > 1:
        if shared == attn_tp:
            g["shared_experts_tp"] = g["attn_tp"]
        else:
            g["shared_experts_tp"] = [list(range(s, s + shared)) for s in range(0, world, shared)]
    if attn_cp > moe_dp:
        g["moe_dp"] = g["attn_cp"]
    elif moe_dp == tp:
        g["moe_dp"] = g["tp"]
    else:
        g["moe_dp"] = [list(range(i * tp + c, (i + 1) * tp + c, moe_tp * ep))
                       for i in range(n_tp_groups) for c in range(moe_tp * ep)]
    if ep == tp:
        g["moe_ep"] = g["tp"]
    else:
        g["moe_ep"] = []
        for i in range(n_tp_groups):
            for d in range(moe_dp):
                for t in range(moe_tp):
                    st = i * tp + d * ep * moe_tp + t
                    g["moe_ep"].append(list(range(st, st + ep * moe_tp, moe_tp)))
    if moe_tp == tp:
        g["moe_tp"] = g["tp"]
    else:
        g["moe_tp"] = [list(range(i * tp + c * moe_tp, i * tp + (c + 1) * moe_tp))
                       for i in range(n_tp_groups) for c in range(ep * moe_dp)]
    n_pp_groups = world // pp
    g["pp"] = [list(range(i, world, n_pp_groups)) for i in range(n_pp_groups)]
    g["self_pp"] = [[r] for r in range(world)]
    return g


FLAGS = {"tp": "--tp", "pp": "--pp", "ep": "--ep", "attn_dp": "--attn-dp", "attn_cp": "--attn-cp",
         "moe_dp": "--moe-dp", "dcp": "--dcp", "shared": "--shared-experts-tp"}


def run(pstate, *args):
    return subprocess.run([pstate, *map(str, args)], capture_output=True, text=True, timeout=60)


def layout_args(world, **cfg):
    args = ["layout", "--world", world]
    for key, value in cfg.items():
        args += [FLAGS[key], value]
    return args


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def all_valid_configs(max_world):
    for world in range(1, max_world + 1):
        for tp in divisors(world):
            for attn_dp in divisors(tp):
                for attn_cp in divisors(tp // attn_dp):
                    attn_tp = tp // attn_dp // attn_cp
                    for ep in divisors(tp):
                        for moe_dp in divisors(tp // ep):
                            for dcp in divisors(tp):
                                for shared in [0] + divisors(attn_tp):
                                    yield world, dict(tp=tp, pp=world // tp, ep=ep, attn_dp=attn_dp,
                                                      attn_cp=attn_cp, moe_dp=moe_dp, dcp=dcp, shared=shared)


CURATED = [
    (8, dict(tp=2, pp=4)),                                   # SGLang docstring, first example
    (8, dict(tp=8, attn_cp=2, ep=4, moe_dp=2)),              # SGLang docstring, second example
    (8, dict(tp=4, pp=2)),                                   # DESIGN.md worked layouts
    (8, dict(tp=8, ep=4)),
    (8, dict(tp=8, attn_cp=4, ep=2, moe_dp=2)),              # moe_dp is attn_cp (attn_cp > moe_dp)
    (4, dict(tp=4, attn_cp=4)),                              # moe_dp -> attn_cp -> tp
    (16, dict(tp=8, pp=2, attn_dp=2, shared=2, dcp=4)),      # shared chunks, dcp chunks
    (16, dict(tp=8, pp=2, attn_dp=2, shared=4)),             # shared is attn_tp
    (12, dict(tp=6, pp=2, ep=3, moe_dp=2, attn_dp=3)),
    (1, dict()),
    (64, dict(tp=16, pp=4, attn_dp=2, attn_cp=2, ep=4, moe_dp=2, dcp=2, shared=2)),
]


# pstate.h's defaults: an omitted size or 0 is the default (tp = world / pp, the others 1, no
# shared-experts group); (world, options given, the explicit config they mean).
DEFAULTS = [
    (4, dict(pp=2), dict(tp=2, pp=2)),
    (4, dict(tp=0, pp=2, ep=0, attn_dp=0, attn_cp=0, moe_dp=0, dcp=0, shared=0), dict(tp=2, pp=2)),
    (8, dict(pp=0, ep=4), dict(tp=8, ep=4)),
    (8, dict(), dict(tp=8)),
    (12, dict(pp=3, attn_dp=2, shared=0), dict(tp=4, pp=3, attn_dp=2)),
]


def check_json(pstate):
    # PSTATE_CLI_LAYOUT_SAMPLE: how many (default 300; CI's ASan job takes 20, since every
    # sanitized process start costs ~0.2 s and the layout code itself is under ASan in test_layout)
    size = int(os.environ.get("PSTATE_CLI_LAYOUT_SAMPLE", "300"))
    sample = random.Random(20240611).sample(list(all_valid_configs(48)), size)
    failures = 0
    cases = [(world, cfg, cfg) for world, cfg in CURATED + sample] + DEFAULTS
    for world, cfg, meant in cases:
        r = run(pstate, *layout_args(world, **cfg), "--json")
        want = {"world_size": world, "groups": sglang_groups(world, **meant)}
        try:
            got = json.loads(r.stdout)  # fails unless stdout is exactly one JSON value
        except json.JSONDecodeError as e:
            got = f"not one JSON object ({e}): {r.stdout[:200]!r}"
        if r.returncode != 0 or got != want:
            failures += 1
            print(f"FAIL world {world} {cfg}: exit {r.returncode}, stderr {r.stderr.strip()!r}\n"
                  f"  got  {got}\n  want {want}")
    print(f"json: {len(cases) - failures} of {len(cases)} layouts match")
    return failures == 0


def check_errors(pstate):
    cases = [
        (layout_args(8, tp=3), "world_size 8 != tensor_parallel_size 3"),
        (layout_args(0), "world_size is 0"),
        (layout_args(2000000), "limit of 1048576"),
        (layout_args(6, tp=6, attn_dp=4), "attention_data_parallel_size"),
        (layout_args(8, tp=8, ep=3), "expert_parallel_size"),
        (layout_args(8, tp=8, dcp=3), "decode_context_parallel_size"),
        (layout_args(8, tp=8, attn_dp=4, shared=4), "shared_experts_tensor_parallel_size"),
        (layout_args(8, tp=8, ep=-1), "expert_parallel_size is -1"),
        (layout_args(6, pp=4), "world_size 6 is not divisible by pipeline_parallel_size 4"),
        (layout_args(8, tp=65536, pp=65536), "overflows int"),
        (["layout"], "--world is required"),
        (["layout", "--world", "eight"], "whole number"),
        (["layout", "--world", "99999999999"], "out of range"),
        (["layout", "--world", "8", "--bogus", "1"], "unknown option --bogus"),
        (["layout", "--world"], "needs a value"),
        (["layout", "--world", "8", "extra"], "unexpected argument"),
        (["no-such-subcommand"], "unknown subcommand"),
        ([], "usage"),
    ]
    ok = True
    for args, needle in cases:
        r = run(pstate, *args)
        if r.returncode != 2 or needle not in r.stderr or (args and r.stdout):
            ok = False
            print(f"FAIL pstate {' '.join(map(str, args))}: exit {r.returncode} (want 2), "
                  f"stderr {r.stderr!r} (want {needle!r}), stdout {r.stdout[:100]!r}")
    print(f"errors: {len(cases)} cases checked")
    return ok


def check_help(pstate):
    ok = True
    for args, needle in [(["--help"], "layout"), (["--help"], "info"), (["--version"], "ABI major"),
                         (["layout", "--help"], "--shared-experts-tp"), (["info", "--help"], "usage: pstate info"),
                         (["layout", "--world", "4"], "self_pp"), (["info"], "UCX"), (["info"], "CUDA/NCCL")]:
        r = run(pstate, *args)
        if r.returncode != 0 or needle not in r.stdout:
            ok = False
            print(f"FAIL pstate {' '.join(args)}: exit {r.returncode}, stdout lacks {needle!r}:\n{r.stdout}{r.stderr}")
    print("help: checked")
    return ok


if __name__ == "__main__":
    pstate_bin, mode = sys.argv[1], sys.argv[2]
    checks = {"json": check_json, "errors": check_errors, "help": check_help}
    sys.exit(0 if checks[mode](pstate_bin) else 1)
