"""Compiling and calling: the command line's outputs bit for bit, PyTorch's within float32
rounding, inputs read in place, outputs owned, a plan per set of sizes."""

import numpy as np
import pytest

import attnc
from conftest import EXAMPLES, FIXTURES, PAD, pad_inputs, read_safetensors, run_cli


def test_the_seed_module_matches_pytorchs_fixture(mha):
    out = mha(**pad_inputs())
    expected = read_safetensors(FIXTURES / f"expected_{PAD}.safetensors")
    assert set(out) == {"out", "attn"}
    for name in out:
        assert out[name].dtype == np.float32
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-4, atol=1e-5)


def cli_outputs(tmp_path, program, weights, inputs, dims, threads=2):
    """`attnc run` of the same program, weights and inputs: its outputs."""
    out = tmp_path / "out.safetensors"
    flags = [f"--dim={k}={v}" for k, v in dims.items()]
    done = run_cli("run", program, "--weights", weights, "--inputs", inputs, "-o", out, "--threads", threads, *flags)
    assert done.returncode == 0, done.stderr
    return read_safetensors(out)


def test_the_seed_module_is_the_command_lines_bit_for_bit(mha, tmp_path):
    weights = FIXTURES / f"weights_{PAD}.safetensors"
    inputs = FIXTURES / f"inputs_{PAD}.safetensors"
    expected = cli_outputs(tmp_path, EXAMPLES / "mha.attn", weights, inputs, {"D": 16, "H": 4})
    out = mha(**pad_inputs())
    for name, want in expected.items():
        assert np.array_equal(out[name], want), name


def test_a_block_is_the_command_lines_bit_for_bit_and_pytorchs(tmp_path):
    name = "gpt2_b2_n9_d24_h4"
    weights = FIXTURES / "blocks" / f"weights_{name}.safetensors"
    inputs = FIXTURES / "blocks" / f"inputs_{name}.safetensors"
    dims = {"D": 24, "H": 4}
    program = EXAMPLES / "gpt2_block.attn"
    f = attnc.compile(program, dims=dims, weights=read_safetensors(weights), threads=2)
    out = f(**read_safetensors(inputs))
    expected = cli_outputs(tmp_path, program, weights, inputs, dims)
    assert np.array_equal(out["out"], expected["out"])
    torch_out = read_safetensors(FIXTURES / "blocks" / f"expected_{name}.safetensors")["out"]
    np.testing.assert_allclose(out["out"], torch_out, rtol=1e-4, atol=1e-4)


def test_inputs_by_keyword_and_by_position_agree(mha):
    inputs = pad_inputs()
    by_name = mha(**inputs)
    by_position = mha(*(inputs[n] for n in mha.inputs))
    mixed = mha(inputs["query"], inputs["key"], mask=inputs["mask"], value=inputs["value"])
    for name in by_name:
        assert np.array_equal(by_name[name], by_position[name])
        assert np.array_equal(by_name[name], mixed[name])


def test_contiguous_float32_inputs_are_read_in_place(mha):
    inputs = pad_inputs()
    addresses = mha._input_addresses(**inputs)
    assert addresses == [inputs[n].ctypes.data for n in mha.inputs]


def test_other_strides_and_dtypes_are_converted_as_pytorch_would(mha):
    inputs = pad_inputs()
    expected = mha(**inputs)
    strided = np.ascontiguousarray(inputs["query"].transpose(1, 0, 2)).transpose(1, 0, 2)
    assert not strided.flags.c_contiguous
    as_f64 = inputs["key"].astype(np.float64)
    as_bool = inputs["mask"].astype(bool)
    converted = dict(inputs, query=strided, key=as_f64, mask=as_bool)
    addresses = mha._input_addresses(**converted)
    assert addresses[0] != strided.ctypes.data and addresses[1] != as_f64.ctypes.data
    out = mha(**converted)
    for name in expected:
        assert np.array_equal(out[name], expected[name])


def misaligned(array):
    """A C-contiguous copy of float32 `array` one byte off its alignment."""
    raw = np.frombuffer(b"\0" + array.tobytes(), dtype=np.float32, offset=1).reshape(array.shape)
    assert raw.flags.c_contiguous and not raw.flags.aligned
    return raw


def test_a_misaligned_float32_array_is_copied_as_other_strides_are(mha):
    # It was borrowed as contiguous, then refused as a slice: "internal error".
    inputs = pad_inputs()
    expected = mha(**inputs)
    out = mha(**dict(inputs, query=misaligned(inputs["query"])))
    for name in expected:
        assert np.array_equal(out[name], expected[name])
    weights = read_safetensors(FIXTURES / f"weights_{PAD}.safetensors")
    weights["linears.0.weight"] = misaligned(weights["linears.0.weight"])
    f = attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4}, weights=weights, threads=2)
    assert np.array_equal(f(**inputs)["out"], expected["out"])


def test_big_endian_floats_are_read_as_their_values(mha):
    # `>f4` was refused as a dtype attnc "cannot read", while the message said it reads floats.
    inputs = pad_inputs()
    expected = mha(**inputs)
    swapped = dict(inputs, query=inputs["query"].astype(">f4"), key=inputs["key"].astype(">f8"))
    out = mha(**swapped)
    for name in expected:
        assert np.array_equal(out[name], expected[name])
    weights = read_safetensors(FIXTURES / f"weights_{PAD}.safetensors")
    weights["linears.0.weight"] = weights["linears.0.weight"].astype(">f4")
    f = attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4}, weights=weights, threads=2)
    assert np.array_equal(f(**inputs)["out"], expected["out"])


def test_an_unreadable_dtype_is_a_type_error(mha):
    inputs = dict(pad_inputs())
    inputs["value"] = inputs["value"].astype(np.complex64)
    with pytest.raises(TypeError, match="input `value`: attnc cannot read dtype complex64"):
        mha(**inputs)
    with pytest.raises(TypeError, match="expected a NumPy array or an object with `__dlpack__`, found `list`"):
        mha(**dict(inputs, value=[[1.0]]))


def test_outputs_own_the_runtimes_buffers(mha):
    out = mha(**pad_inputs())["out"]
    # A NumPy array over memory a Rust Vec owns: its base is the Vec's container, not a
    # copy NumPy made (a copy would own its data and have no base).
    assert type(out.base).__name__ == "PySliceContainer"
    assert out.flags.c_contiguous and out.flags.writeable


def test_new_sizes_compile_once_and_are_kept():
    f = attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4}, threads=1)
    rng = np.random.default_rng(0)

    def call(b, n):
        x = rng.standard_normal((b, n, 16), dtype=np.float32)
        return f(query=x, key=x, value=x, mask=np.ones((b, 1, n), np.float32))

    call(1, 3)
    call(1, 3)
    call(2, 5)
    call(1, 3)
    assert [(p["sizes"]["B"], p["sizes"]["N"]) for p in f.plans] == [(1, 3), (2, 5)]
    assert all(p["compile_ms"] > 0 and p["kernels"] > 0 for p in f.plans)
    # The weights are laid out once: the second plan's prologue computes what the first's did.
    assert [p["prepared"] for p in f.plans] == [True, False]


def test_the_interpreter_agrees_with_the_jit(mha):
    reference = attnc.compile(
        EXAMPLES / "mha.attn",
        dims={"D": 16, "H": 4},
        weights=FIXTURES / f"weights_{PAD}.safetensors",
        backend="interp",
    )
    inputs = pad_inputs()
    a, b = mha(**inputs), reference(**inputs)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6)
    assert reference.plans == []


def test_source_text_compiles_as_a_file_does():
    text = (EXAMPLES / "mha.attn").read_text()
    f = attnc.compile(text, dims={"D": 16, "H": 4}, seed=3)
    g = attnc.compile(str(EXAMPLES / "mha.attn"), dims={"D": 16, "H": 4}, seed=3)
    inputs = pad_inputs()
    assert np.array_equal(f(**inputs)["out"], g(**inputs)["out"])


STATE_PROGRAM = """
dim B, C, N, D = 4
input pos: [N] int64
input new: [B, N, D]
state cache: [B, C, D]
cache.index_copy_(1, pos, new)
output total = cache.sum(-1)
"""


@pytest.mark.parametrize("backend", ["jit", "interp"])
def test_a_state_is_kept_between_calls_and_reset_to_zeros(backend):
    f = attnc.compile(STATE_PROGRAM, dims={"C": 5}, backend=backend, threads=2)
    assert f.inputs == ["pos", "new"] and f.outputs == ["total"]
    assert f.state("cache") is None
    ones = np.ones((1, 2, 4), np.float32)
    f(pos=np.array([0, 1]), new=ones)
    out = f(pos=np.array([3]), new=2 * ones[:, :1])
    assert np.array_equal(out["total"], [[4.0, 4.0, 0.0, 8.0, 0.0]])
    assert f.state("cache").shape == (1, 5, 4)
    assert len(f.plans) == (2 if backend == "jit" else 0), "one plan per N, none per position"
    f.reset_state()
    assert f.state("cache") is None
    out = f(pos=np.array([4]), new=ones[:, :1])
    assert np.array_equal(out["total"], [[0.0, 0.0, 0.0, 0.0, 4.0]])
    with pytest.raises(attnc.RunError, match="outside the 5 positions"):
        f(pos=np.array([5]), new=ones[:, :1])
