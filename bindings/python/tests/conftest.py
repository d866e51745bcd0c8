"""Test set-up: find the built package and the `pstate` launcher, and run rank programs.

The package under test is the one on PYTHONPATH (ctest points it at the build tree's
bindings/python, or a `pip install` target). Multi-rank tests start `pstate run -n N -- python3
ranks.py SCENARIO` (PSTATE_CLI, else PSTATE_BUILD_DIR/pstate, else `pstate` on PATH) and check
its exit status; every rank checks its results against numpy/Python computations and exits
non-zero on the first mismatch. Every launch is bounded by a timeout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RANKS = HERE / "ranks.py"


def launcher() -> str:
    cli = os.environ.get("PSTATE_CLI")
    if cli:
        return cli
    build = os.environ.get("PSTATE_BUILD_DIR")
    if build and (Path(build) / "pstate").exists():
        return str(Path(build) / "pstate")
    found = shutil.which("pstate")
    if not found:
        pytest.fail("no `pstate` launcher: set PSTATE_CLI or PSTATE_BUILD_DIR, or put pstate on PATH")
    return found


def run_ranks(n: int, scenario: str, *, timeout: float = 120, grace_ms: int = 3000,
              extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """`pstate run -n n -- python3 ranks.py scenario`, output captured."""
    env = dict(os.environ)
    env.setdefault("PSTATE_TIMEOUT_MS", "60000")
    # The start-up deadline apart from the calls' (a scenario's short PSTATE_TIMEOUT_MS bounds its
    # calls): on a loaded machine one rank's `import torch` can finish 10 s after the other's.
    env.setdefault("PSTATE_INIT_TIMEOUT_MS", "120000")
    if extra_env:
        env.update(extra_env)
    cmd = [launcher(), "run", "-n", str(n), "--grace-ms", str(grace_ms), "--", sys.executable, str(RANKS), scenario]
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, check=False)


@pytest.fixture
def ranks():
    def go(n: int, scenario: str, **kw) -> str:
        done = run_ranks(n, scenario, **kw)
        assert done.returncode == 0, f"pstate run -n {n} {scenario} exited {done.returncode}:\n{done.stdout}"
        return done.stdout
    return go
