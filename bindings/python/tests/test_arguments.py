"""Arguments the Python binding takes: group kinds by member, name (any case) or number; anything
else is InvalidArgumentError naming what was given and what is accepted."""
import pytest

import pstate
from pstate import GroupKind


@pytest.fixture
def one_rank(tmp_path):
    with pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", timeout_ms=10000) as ps:
        yield ps


def test_group_accepts_the_kind_by_member_name_and_number(one_rank):
    ps = one_rank
    ps.initialize_model_parallel()
    for kind in (GroupKind.TP, "tp", "TP", " Tp ", 1):
        assert ps.group(kind).kind == GroupKind.TP
    assert ps.group("world").kind == GroupKind.WORLD
    assert ps.group("attn_tp").kind == GroupKind.ATTN_TP


@pytest.mark.parametrize("bad", ["tensor", "", 99, -1, True, 1.0, None, pstate.ReduceOp.PROD])
def test_group_refuses_anything_else_naming_the_accepted_names(one_rank, bad):
    with pytest.raises(pstate.InvalidArgumentError, match=r'group kind .* is not a GroupKind.*"world", "tp"'):
        one_rank.group(bad)
