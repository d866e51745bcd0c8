"""Multi-rank tests: each starts `pstate run -n N -- python3 ranks.py SCENARIO` (see ranks.py for
what every rank checks) and requires a clean exit of every rank."""
from __future__ import annotations

import re

import pytest

from conftest import run_ranks


@pytest.mark.parametrize("env", [{}, {"PSTATE_SHM": "0"}, {"PSTATE_NAN_CHECK": "1", "PSTATE_TEST_NAN": "1"}],
                         ids=["shm", "ucx", "nan-check"])
def test_hooks_see_every_call_in_order_refuse_and_abort_two_ranks(ranks, env):
    """Issue 45: ps.add_hook (a Python callable) sees every call of a 2-rank job in order with its
    status; PSTATE_NAN_CHECK=1 catches a NaN before the all_reduce on every rank (ranks.py: hooks)."""
    ranks(2, "hooks", extra_env={"PSTATE_TIMEOUT_MS": "20000", **env})


@pytest.mark.parametrize("env", [{}, {"PSTATE_SHM": "0"}], ids=["shm", "ucx"])
def test_group_timeout_ends_a_call_at_the_groups_timeout_two_ranks(ranks, env):
    """Issue 43: Group.set_timeout(200) under a 60 s context timeout: a peer that does not come is
    a TimeoutError at ~200 ms naming the group's timeout (ranks.py: group_timeout)."""
    ranks(2, "group_timeout", extra_env=env)


def test_lifecycle_order_and_out_of_order_calls_two_ranks(ranks):
    ranks(2, "lifecycle")


def test_group_info_of_tp2_pp2_matches_sglang_four_ranks(ranks):
    ranks(4, "groups_tp_pp")


def test_every_op_on_float32_and_int64_world_tp_pp_four_ranks(ranks):
    ranks(4, "ops")


def test_reduce_and_scatter_from_every_root_three_ranks(ranks):
    ranks(3, "reduce_and_scatter")


@pytest.mark.parametrize("env", [{}, {"PSTATE_SHM": "0"}], ids=["shm", "ucx"])
def test_all_to_all_v_uneven_permuted_mismatch_and_refusal_three_ranks(ranks, env):
    ranks(3, "all_to_all_v", extra_env=dict(env, PSTATE_TIMEOUT_MS="20000"))


def test_variable_counts_requests_p2p_batch_custom_and_sliced_dicts_four_ranks(ranks):
    ranks(4, "nonblocking", extra_env={"PSTATE_TIMEOUT_MS": "20000"})


@pytest.mark.parametrize("calls,env", [("gather", {}), ("reduce", {}), ("scatter", {}), ("symmetric", {}),
                                       ("gather,reduce,scatter,symmetric", {"PSTATE_SHM": "0"}),
                                       ("gather,reduce,scatter,symmetric", {"PSTATE_CHECK": "1"})],
                         ids=["gather", "reduce", "scatter", "symmetric", "all-ucx", "all-check"])
def test_an_argument_one_rank_refuses_fails_the_call_on_every_rank_and_keeps_step_two_ranks(ranks, calls, env):
    """Issue 46: a root's bad out or send, or one rank's bad out, raises on every rank at once;
    every later call returns its own data (ranks.py: rooted_refusals)."""
    ranks(2, "rooted_refusals", extra_env={"PSTATE_TIMEOUT_MS": "10000", "PSTATE_TEST_CALLS": calls, **env},
          timeout=60)


def test_broadcast_object_takes_any_picklable_two_ranks(ranks):
    ranks(2, "objects")


def test_unpicklable_object_is_refused_on_every_rank_and_the_next_call_is_not_shifted_three_ranks(ranks):
    ranks(3, "object_refusals", extra_env={"PSTATE_TIMEOUT_MS": "20000"})


def test_bytes_that_are_not_an_object_frame_are_a_clean_error_three_ranks(ranks):
    ranks(3, "object_garbage", extra_env={"PSTATE_TIMEOUT_MS": "20000"})


def test_errors_map_to_exception_classes_two_ranks(ranks):
    ranks(2, "errors")


def test_gil_is_released_during_a_blocking_call(ranks, tmp_path):
    ranks(2, "gil", extra_env={"PSTATE_TEST_TMP": str(tmp_path)})


@pytest.mark.parametrize("shm", ["1", "0"])
def test_peer_killed_mid_op_raises_peer_lost_or_timeout(shm):
    done = run_ranks(2, "peer_killed", grace_ms=30000, timeout=120, extra_env={"PSTATE_SHM": shm})
    # rank 1 killed itself: the launcher reports it; rank 0 observed the failure and aborted
    assert done.returncode != 0, done.stdout
    match = re.search(r"\[0\] SURVIVOR: (PeerLostError|TimeoutError) status=(PEER_LOST|TIMEOUT)", done.stdout)
    assert match, done.stdout
    # said once, by pstate, in Python's names: no "WARN context failed" repeating the exception,
    # no UCX log line (UCX logs only at PSTATE_DEBUG=TRACE), no C name
    assert "pstate_" not in done.stdout, done.stdout
    assert match.group(2) != "PEER_LOST" or "call ps.shrink() (survivors go on without the dead) or ps.abort()" in done.stdout, done.stdout
    assert "context failed" not in done.stdout, done.stdout
    assert not re.search(r"UCX +(WARN|ERROR|DIAG)|mpool|unexpected tag-receive", done.stdout), done.stdout


@pytest.mark.parametrize("op", ["all_reduce", "recv"])
def test_abort_from_a_watchdog_thread_stops_a_blocked_call(ranks, tmp_path, op):
    """ps.abort() from another Python thread while the main thread is blocked in a collective
    (shared memory) or a recv (UCX): AbortedError there, the state freed (ranks.py:
    aborted_from_a_thread)."""
    out = ranks(2, "aborted_from_a_thread", extra_env={"PSTATE_TEST_TMP": str(tmp_path), "PSTATE_TEST_OP": op,
                                                      "PSTATE_TIMEOUT_MS": "60000"}, timeout=90)
    assert f"ABORTED {op}" in out, out


@pytest.mark.parametrize("op", ["all_reduce", "recv"])
def test_ctrl_c_interrupts_a_call_blocked_on_a_peer_that_never_comes(ranks, tmp_path, op):
    """SIGINT to a rank blocked in a collective (shared memory) or a recv (UCX): KeyboardInterrupt
    within a second (ranks.py: interrupted), then the documented state (failed: abort next)."""
    out = ranks(2, "interrupted", extra_env={"PSTATE_TEST_TMP": str(tmp_path), "PSTATE_TEST_OP": op,
                                             "PSTATE_TIMEOUT_MS": "20000"}, timeout=60)
    assert f"INTERRUPTED {op} after" in out, out
