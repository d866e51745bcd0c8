"""torch tensors through the Python binding, as a torch program uses them (python3-torch, CPU):

- a torch CPU tensor is read directly (address, dtype, shape), not exported through DLPack: its
  Buffer is the tensor's own address, every dtype torch and pstate share maps, bfloat16 included;
- what torch would raise on (requires grad and written, meta, bool, not contiguous, complex) is
  pstate.InvalidArgumentError saying what to do, before any C call;
- results an operation allocates are torch tensors for torch input (bfloat16 included);
- tensor dicts take torch tensors and give them back with tensors="torch";
- multi-rank: all_gather / tp_all_gather along any dim against torch.cat of the ranks' inputs,
  out= shapes, reduce with op names, dicts plain/broadcast/sliced (ranks.py torch_tensors), and a
  shared-memory mismatch that fails the context (ranks.py shm_mismatch).
"""
import numpy as np
import pytest

import pstate
from pstate import DType
from pstate._buffers import resolve

torch = pytest.importorskip("torch", reason="python3-torch (./build.sh deps installs it)")


@pytest.fixture
def one_rank(tmp_path):
    with pstate.init(world_size=1, rank=0, init_method=f"file://{tmp_path}/store", timeout_ms=10000) as ps:
        yield ps


TORCH_TO_PSTATE = [
    (torch.int8, DType.INT8), (torch.uint8, DType.UINT8), (torch.int32, DType.INT32), (torch.int64, DType.INT64),
    (torch.float16, DType.FLOAT16), (torch.float32, DType.FLOAT32), (torch.float64, DType.FLOAT64),
    (torch.bfloat16, DType.BFLOAT16),
]


@pytest.mark.parametrize("tdtype, dtype", TORCH_TO_PSTATE)
def test_a_tensor_is_read_directly_with_its_dtype_address_and_shape(tdtype, dtype):
    t = torch.zeros(2, 3, dtype=tdtype)
    buf = resolve(t, "buf", writable=True)
    assert (buf.obj, buf.count, buf.dtype, buf.shape) == (t.data_ptr(), 6, dtype, (2, 3))


def test_a_view_with_an_offset_gives_its_own_address():
    base = torch.arange(10, dtype=torch.float32)
    assert resolve(base[3:7], "buf", writable=False).obj == base.data_ptr() + 3 * 4


def test_a_container_tensor_carries_the_dtype_named():
    assert resolve(torch.zeros(4, dtype=torch.int16), "buf", writable=True, dtype="bfloat16").dtype == DType.BFLOAT16
    assert resolve(torch.zeros(4, dtype=torch.uint8), "buf", writable=True, dtype=DType.FP8_E5M2).dtype == DType.FP8_E5M2
    with pytest.raises(pstate.InvalidArgumentError, match="dtype=float32 does not match the tensor's dtype torch.float16"):
        resolve(torch.zeros(4, dtype=torch.float16), "buf", writable=True, dtype=DType.FLOAT32)


@pytest.mark.parametrize("make, text", [
    (lambda: torch.ones(3, requires_grad=True), "requires grad"),
    (lambda: torch.zeros(3, device="meta"), "meta tensor"),
    (lambda: torch.zeros(3, dtype=torch.bool), r"torch.bool has no pstate dtype; send t\.to\(torch.uint8\)"),
    (lambda: torch.zeros(4, 4)[:, 1], "not contiguous"),
    (lambda: torch.zeros(3, dtype=torch.complex64), "complex64 has no pstate dtype"),
    (lambda: torch.zeros(3, dtype=torch.int16), "int16 has no pstate dtype; pass dtype="),
    (lambda: torch.zeros(3).to_sparse(), r"torch cannot give this tensor's memory \(torch.sparse_coo\)"),
])
def test_what_torch_refuses_is_an_invalid_argument_error(one_rank, make, text):
    with pytest.raises(pstate.InvalidArgumentError, match=text):
        one_rank.world.all_reduce(make())


def test_results_of_a_torch_input_are_torch_tensors_bfloat16_included(one_rank):
    w = one_rank.world
    for tdtype, _ in TORCH_TO_PSTATE:
        x = torch.arange(6).reshape(2, 3).to(tdtype)
        for got in (w.all_gather(x), w.all_to_all(x), w.reduce_scatter(x) if tdtype != torch.uint8 else x):
            assert isinstance(got, torch.Tensor) and got.dtype == tdtype and torch.equal(got, x), (tdtype, got)


def test_out_dtype_disagreement_names_send_not_a_dtype_argument(one_rank):
    w = one_rank.world
    with pytest.raises(pstate.InvalidArgumentError) as err:
        w.all_gather(np.zeros(4, np.float32), out=np.zeros(4, np.float16))
    assert "out: send's dtype float32 does not match the buffer's format 'e'" in err.value.detail, err.value.detail
    with pytest.raises(pstate.InvalidArgumentError, match=r"out: dtype=float32 does not match"):
        w.all_gather(np.zeros(4, np.float32), out=np.zeros(4, np.float16), dtype=DType.FLOAT32)


def test_reduce_takes_op_names_as_all_reduce_does(one_rank):
    w = one_rank.world
    x = torch.tensor([3.0, -1.0])
    assert w.reduce(x, 0, "max") is x and torch.equal(x, torch.tensor([3.0, -1.0]))
    assert torch.equal(w.reduce(torch.tensor([2, 5]), 0, "Min", out=torch.zeros(2, dtype=torch.int64)),
                       torch.tensor([2, 5]))
    with pytest.raises(pstate.InvalidArgumentError, match=r"op 'median' is not a ReduceOp"):
        w.reduce(x, 0, "median")


def test_all_gather_out_must_have_the_results_shape(one_rank):
    w = one_rank.world
    x = torch.zeros(2, 3)
    for good in (torch.zeros(6), torch.zeros(1, 2, 3)):  # 1-d of the result's size, send's shape stacked
        assert w.all_gather(x, good) is good
    for out in (torch.zeros(3, 2), torch.zeros(7), torch.zeros(4, 3)):
        with pytest.raises(pstate.InvalidArgumentError, match=r"out has shape"):
            w.all_gather(x, out)
    with pytest.raises(pstate.InvalidArgumentError, match=r"dim=2 is out of range for send of shape \(2, 3\)"):
        w.all_gather(x, dim=2)


def test_one_rank_tensor_dict_broadcast_takes_torch_tensors_of_every_dtype(one_rank):
    d = {str(t): torch.ones(2, dtype=t) for t, _ in TORCH_TO_PSTATE}
    assert one_rank.world.broadcast_tensor_dict(d) is d
    mixed = {"m": torch.tensor([True, False]), "h": torch.arange(3, dtype=torch.int16), "c": torch.ones(2, dtype=torch.cfloat),
             "s": "text", "l": [1, 2]}
    assert one_rank.world.broadcast_tensor_dict(mixed) is mixed
    for bad, text in ((torch.zeros(2).to_sparse(), "torch cannot give"), (torch.zeros(2, device="meta"), "meta tensor")):
        with pytest.raises(pstate.InvalidArgumentError, match=text):
            one_rank.world.broadcast_tensor_dict({"x": bad})
    with pytest.raises(pstate.InvalidArgumentError, match=r"tensors must be None \(as the sender sent them\), \"numpy\" or \"torch\""):
        one_rank.world.recv_tensor_dict(0, tensors="cupy")


def test_received_blocks_become_torch_tensors_of_every_pstate_dtype():
    """decode(..., "torch") over the blocks the C collector hands back (here bytearrays holding the
    expected values' bytes, made with numpy): bfloat16 as torch.bfloat16, fp8 in uint8 where torch
    has no fp8 type, uint32/uint64 kept as numpy where torch has no such type; no copies."""
    from pstate._tensor_dict import decode

    bf16 = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    cases = {
        "bf16": (DType.BFLOAT16, bf16.view(torch.int16).numpy().tobytes(), bf16),
        "f16": (DType.FLOAT16, np.array([0.5, 1.0, 2.5], np.float16).tobytes(), torch.tensor([0.5, 1.0, 2.5], dtype=torch.float16)),
        "i8": (DType.INT8, np.array([-1, 2, 3], np.int8).tobytes(), torch.tensor([-1, 2, 3], dtype=torch.int8)),
        "fp8": (DType.FP8_E4M3, bytes([0x38, 0x40, 0x44]), torch.tensor([0x38, 0x40, 0x44], dtype=torch.uint8)),
        "i64": (DType.INT64, np.array([1, -2, 3], np.int64).tobytes(), torch.tensor([1, -2, 3])),
    }
    blocks = {k: bytearray(raw) for k, (_, raw, _) in cases.items()}
    got = decode([(k, int(d), (3,), blocks[k], 0) for k, (d, _, _) in cases.items()], "torch")
    for key, (dtype, _, want) in cases.items():
        if dtype in (DType.FP8_E4M3,) and hasattr(torch, "float8_e4m3fn"):
            want = want.view(torch.float8_e4m3fn)
        assert isinstance(got[key], torch.Tensor) and got[key].dtype == want.dtype, (key, got[key])
        assert torch.equal(got[key].view(torch.uint8), want.view(torch.uint8)), (key, got[key])
        assert got.dtypes[key] == dtype
    got["bf16"][0] = 7.0  # over the received block itself
    assert torch.frombuffer(blocks["bf16"], dtype=torch.bfloat16)[0].item() == 7.0
    wide = decode([("u32", int(DType.UINT32), (2,), bytearray(np.array([1, 2], np.uint32).tobytes()), 0)], "torch")
    if hasattr(torch, "uint32"):
        assert wide["u32"].dtype == torch.uint32
    else:
        assert isinstance(wide["u32"], np.ndarray) and wide["u32"].tolist() == [1, 2]


def test_torch_tensors_dicts_dims_and_errors_four_ranks(ranks):
    ranks(4, "torch_tensors")


def test_a_shared_memory_mismatch_fails_the_context_and_says_so_two_ranks(ranks):
    ranks(2, "shm_mismatch")
