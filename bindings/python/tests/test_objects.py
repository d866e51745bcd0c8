"""Object frames (pstate._objects) without communication: what broadcast_object & co. send and
how a receiver reads it. The multi-rank behaviour is in ranks.py (object_refusals,
object_garbage)."""
from __future__ import annotations

import pickle

import pytest

import pstate
from pstate import _objects


def test_a_pickle_frame_round_trips_and_starts_with_the_versioned_header():
    obj = {"step": 7, "tokens": list(range(100)), "blob": b"\x00" * 70000}
    frame = _objects.encode(obj)
    assert bytes(frame[:6]) == b"PSOB\x01p"
    assert _objects.decode(frame, 0, "test") == obj
    assert _objects.decode(bytes(frame), 0, "test") == obj  # bytes as the C call returns them


def test_an_unpicklable_object_raises_the_pickling_error_and_its_refusal_names_it():
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)) as info:
        _objects.encode(lambda: 1)
    frame = _objects.refusal(info.value)
    assert frame.startswith(b"PSOB\x01r")
    with pytest.raises(pstate.ObjectRefusedError) as refused:
        _objects.decode(frame, 3, "broadcast_object on tp:0")
    err = refused.value
    assert isinstance(err, pstate.InvalidArgumentError) and isinstance(err, ValueError)
    assert err.status == pstate.Status.INVALID_ARGUMENT
    assert err.rank == 3 and err.reasons == {3: err.reason}
    assert "lambda" in err.reason and "Python binding" in err.reason
    assert "broadcast_object on tp:0: group rank 3 could not encode its object" in err.detail


def test_a_long_reason_is_cut_so_the_refusal_stays_small():
    frame = _objects.refusal(ValueError("x" * 100000))
    assert len(frame) == 6 + _objects.MAX_REASON and frame.endswith(b"...")


@pytest.mark.parametrize("raw, text", [
    (b"", "not a pstate object frame"),
    (b"PSO", "not a pstate object frame"),
    (b"PSOB\x01", "not a pstate object frame"),
    (b"garbage bytes", "not a pstate object frame"),
    (pickle.dumps([1, 2]), "not a pstate object frame"),  # an unframed pickle is never loaded
    (b"PSOB\x02p" + pickle.dumps(1), "version 2"),
    (b"PSOB\x01g\x01\x02", "gob value (Go binding)"),
    (b"PSOB\x01Z", "unknown kind"),
])
def test_bytes_that_are_not_a_pickle_frame_are_object_frame_error(raw, text):
    with pytest.raises(pstate.ObjectFrameError) as info:
        _objects.decode(raw, 1, "recv_object on world:0")
    assert info.value.rank == 1 and text in info.value.detail, info.value.detail
    assert isinstance(info.value, pstate.InvalidArgumentError)


def test_refusals_of_several_ranks_name_all_of_them():
    err = _objects.refused({2: "b", 1: "a"}, "all_gather_object on world:0")
    assert err.rank == 1 and err.reason == "a" and err.reasons == {1: "a", 2: "b"}
    assert "group ranks [1, 2]" in err.detail and "rank 2: b" in err.detail
