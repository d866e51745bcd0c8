#!/usr/bin/env python3
"""make_seeds.py — writes the hand-made seed inputs of the fuzz targets into corpus/<target>/.

Seeds are valid (and a few nearly valid) inputs, so the fuzzers start from the interesting part
of the input space: every store opcode, launch environments of torchrun / mpirun / srun, and
the worked layouts of DESIGN.md. Deterministic; rerun after changing it and commit the result.
Inputs the fuzzers found later are merged into the same folders by fuzz.sh (-merge=1).
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x53545350


def frame(op, body=b""):
    payload = bytes([op]) + body
    return struct.pack("<I", len(payload)) + payload


def s(b):
    return struct.pack("<I", len(b)) + b


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(s(k) for k in ks)


def wire_seeds():
    nonce = bytes(range(32))
    hello = frame(1, struct.pack("<IHii", MAGIC, 1, 3, 8) + nonce)
    challenge = frame(2, struct.pack("<IHB", MAGIC, 1, 1) + nonce)
    proof = frame(3, nonce)
    welcome = frame(4, nonce + struct.pack("<i", 8))
    reqs = [frame(10, s(b"pstate/peer/3") + s(b"\x00\x01value")),
            frame(11, s(b"pstate/job") + struct.pack("<I", 5000)),
            frame(12, s(b"pstate/init") + struct.pack("<q", 1)),
            frame(13, struct.pack("<I", 100) + keys(b"a", b"bb")),
            frame(14, keys(b"k")),
            frame(15, s(b"k"))]
    replies = [frame(32), frame(33, s(b"v" * 40)), frame(34, struct.pack("<q", -7)), frame(35, b"\x01"),
               frame(36, struct.pack("<I", 3) + keys(b"x", b"y")), frame(37, struct.pack("<I", 9) + s(b"job token refused"))]
    out = {"hello_h": b"\x01" + hello, "challenge_h": b"\x01" + challenge, "proof_h": b"\x01" + proof,
           "welcome_h": b"\x01" + welcome, "session": b"\x00" + hello + proof + b"".join(reqs),
           "replies": b"\x00" + challenge + welcome + b"".join(replies),
           "garbage_http": b"\x01GET / HTTP/1.1\r\nHost: x\r\n\r\n",
           "oversize": b"\x01" + struct.pack("<I", 1 << 30) + b"\x0a",
           "truncated_set": b"\x00" + frame(10, s(b"key") + struct.pack("<I", 100) + b"short")}
    for i, r in enumerate(reqs + replies):
        out["frame_%02d" % i] = b"\x00" + r
    return out


def launch_env_seeds():
    return {
        "torchrun": "RANK=3\nWORLD_SIZE=8\nLOCAL_RANK=1\nLOCAL_WORLD_SIZE=2\nMASTER_ADDR=198.18.0.10\nMASTER_PORT=29500\n"
                    "PSTATE_JOB_TOKEN=0123456789abcdef0123\nPSTATE_SOCKET_IFNAME=eth0\n",
        "mpirun": "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=4\nOMPI_COMM_WORLD_LOCAL_RANK=1\n"
                  "OMPI_COMM_WORLD_LOCAL_SIZE=2\nMASTER_ADDR=node0\nMASTER_PORT=29500\n",
        "srun": "SLURM_PROCID=5\nSLURM_NTASKS=16\nSLURM_LOCALID=1\nMASTER_ADDR=[::1]\nMASTER_PORT=1\n"
                "PSTATE_TIMEOUT_MS=5000\n",
        "params_tcp": "@world=4\n@rank=2\n@local=0\n@init=tcp://127.0.0.1:29500\n@timeout=3000\n@token=secret\n",
        "params_file": "@world=2\n@rank=1\n@init=file:///tmp/pstate-store\n@ifname=lo\n",
        "mixed": "RANK=1\nSLURM_NTASKS=4\nWORLD_SIZE=\n@init=env://\nMASTER_ADDR=h\nMASTER_PORT=0\n",
    }


def init_method_seeds():
    return {"env": "env://", "tcp4": "tcp://127.0.0.1:29500", "tcp6": "tcp://[::1]:29500",
            "tcpname": "tcp://node-0.cluster:1", "file": "file:///shared/pstate/job1/", "bad": "tcp://[::1:29500"}


def layout_seeds():
    # mode, world, tp, pp, ep, attn_dp, attn_cp, moe_dp, dcp, shared_experts_tp
    rows = {"tp4pp2": [0, 8, 4, 2, 1, 1, 1, 1, 1, 0], "tp8ep4": [0, 8, 8, 1, 4, 1, 1, 1, 1, 0],
            "sglang_doc": [0, 8, 8, 1, 4, 1, 2, 2, 1, 0], "dcp_shared": [1, 0, 8, 2, 2, 2, 1, 1, 4, 2],
            "attn_dp": [1, 0, 8, 2, 4, 4, 1, 1, 1, 0], "bad_world": [0, 7, 4, 2, 1, 1, 1, 1, 1, 0]}
    out = {k: bytes(v) for k, v in rows.items()}
    out["huge"] = bytes([0, 240]) + struct.pack("<i", 1 << 21) + bytes([240]) + struct.pack("<i", 46341) + \
        bytes([240]) + struct.pack("<i", 46341)
    out["negative"] = bytes([0, 8, 240]) + struct.pack("<i", -8) + bytes([1, 1, 1, 1, 1, 1, 0])
    return out


def write(target, seeds):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, "seed_" + name), "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)


if __name__ == "__main__":
    write("wire", wire_seeds())
    write("launch_env", launch_env_seeds())
    write("init_method", init_method_seeds())
    write("layout", layout_seeds())
