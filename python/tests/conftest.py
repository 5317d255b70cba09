"""Shared helpers of the Python module's tests: the repository's files, safetensors read
and written without the `safetensors` package, and the command line to compare with."""

import json
import os
import pathlib
import shutil
import struct
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
PAD = "pad_b2_n7_d16_h4"

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "BOOL": np.bool_}


def read_safetensors(path):
    """Every tensor of a safetensors file, as NumPy arrays."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    out = {}
    for key, info in header.items():
        start, end = info["data_offsets"]
        buf = data[8 + n + start : 8 + n + end]
        out[key] = np.frombuffer(buf, dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    """`tensors` (name to float32 array) as a safetensors file."""
    header, offset, blobs = {}, 0, []
    for key, array in tensors.items():
        blob = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[key] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def attnc_binary():
    """The command line: `ATTNC_BIN`, the release build of this checkout, or `attnc` on the
    PATH; the test is skipped without one."""
    candidates = [os.environ.get("ATTNC_BIN"), ROOT / "target" / "release" / "attnc", shutil.which("attnc")]
    for c in candidates:
        if c and pathlib.Path(c).is_file():
            return str(c)
    pytest.skip("no attnc binary: build it with `cargo build --release` or set ATTNC_BIN")


def run_cli(*args):
    """Runs the command line; its completed process (stdout and stderr as text)."""
    return subprocess.run([attnc_binary(), *map(str, args)], capture_output=True, text=True)


def pad_inputs():
    return read_safetensors(FIXTURES / f"inputs_{PAD}.safetensors")


@pytest.fixture(scope="session")
def mha():
    """The seed module at the pad fixture's dims, with its PyTorch weights, on 2 threads."""
    import attnc

    return attnc.compile(
        EXAMPLES / "mha.attn",
        dims={"D": 16, "H": 4},
        weights=FIXTURES / f"weights_{PAD}.safetensors",
        threads=2,
    )
