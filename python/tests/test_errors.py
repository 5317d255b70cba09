"""`check`, and every failure as an exception with the command line's code and message."""

import numpy as np
import pytest

import attnc
from conftest import EXAMPLES, FIXTURES, PAD, pad_inputs, read_safetensors, run_cli, write_safetensors


def test_check_returns_the_bindings_the_command_line_prints():
    bindings = attnc.check(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4})
    by_name = {b.name: b for b in bindings}
    q = by_name["query"]
    assert (q.kind, q.shape, q.contiguous, q.strides, q.sizes) == ("input", "[B, N, D]", True, None, None)
    wq = by_name["Wq"]
    assert (wq.kind, wq.sizes) == ("param", [16, 16])
    assert any(not b.contiguous and b.strides for b in bindings)
    text = run_cli("check", EXAMPLES / "mha.attn", "--dim", "D=16", "--dim", "H=4").stdout
    assert [line.split()[1] for line in text.splitlines()] == [b.name for b in bindings]


BAD = """dim B, N
dim D = 10, H = 4
dim Dk = D / H
input x: [B, N, D]
output y = x.view(B, N, H, Dk)
"""


def test_a_program_with_errors_is_a_compile_error(tmp_path):
    with pytest.raises(attnc.CompileError) as caught:
        attnc.check(BAD)
    diags = caught.value.diagnostics
    assert [d.code for d in diags] == ["E0205"]
    d = diags[0]
    assert (d.line, d.column) == (3, 10) and d.severity == "error"
    assert d.message == "`D = 10` is not a multiple of `H = 4`"
    path = tmp_path / "bad.attn"
    path.write_text(BAD)
    cli = run_cli("check", path)
    assert cli.returncode == 1
    with pytest.raises(attnc.CompileError) as from_file:
        attnc.compile(path)
    assert str(from_file.value) == cli.stderr.rstrip()


def test_an_unknown_dim_is_a_value_error():
    with pytest.raises(ValueError, match="Q"):
        attnc.check(EXAMPLES / "mha.attn", dims={"Q": 3})


def test_a_missing_weight_raises_at_compile_time_as_the_command_line_says(tmp_path):
    weights = read_safetensors(FIXTURES / f"weights_{PAD}.safetensors")
    del weights["linears.2.bias"]
    path = tmp_path / "w.safetensors"
    write_safetensors(path, weights)
    dims = ["--dim", "D=16", "--dim", "H=4", "--dim", "B=1", "--dim", "N=2", "--dim", "M=2"]
    cli = run_cli("run", EXAMPLES / "mha.attn", *dims, "--weights", path)
    assert cli.returncode == 1
    with pytest.raises(attnc.RunError) as caught:
        attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4}, weights=path)
    assert caught.value.code == "E0302"
    assert str(caught.value) == cli.stderr.rstrip()
    with pytest.raises(attnc.RunError, match=r"^error\[E0302\]: weight `linears.2.bias` of param `bv` is missing from the weights given"):
        attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4}, weights=weights)


def test_a_misshapen_or_integer_weight_is_e0303():
    weights = read_safetensors(FIXTURES / f"weights_{PAD}.safetensors")
    with pytest.raises(attnc.RunError, match=r"E0303.*has shape \[16, 16\] in the weights given, but is declared \[D, D\] = \[32, 32\]"):
        attnc.compile(EXAMPLES / "mha.attn", dims={"D": 32, "H": 4}, weights=weights)
    weights["linears.0.bias"] = weights["linears.0.bias"].astype(np.int64)
    with pytest.raises(attnc.RunError, match=r"E0303.*dtype I64"):
        attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4}, weights=weights)


def test_misshapen_inputs_are_a_run_error_with_the_command_lines_code(mha):
    inputs = pad_inputs()
    with pytest.raises(attnc.RunError) as caught:
        mha(**dict(inputs, value=inputs["value"][:, :5]))
    assert caught.value.code == "E0301"
    assert "input `value` has size 5 on axis 1, but `M` is 7 from input `key`" in str(caught.value)
    with pytest.raises(attnc.RunError, match="E0301"):
        mha(**dict(inputs, query=inputs["query"][0]))


def test_call_signature_errors_are_type_errors(mha):
    inputs = pad_inputs()
    with pytest.raises(TypeError, match="missing input `mask`"):
        mha(**{k: v for k, v in inputs.items() if k != "mask"})
    with pytest.raises(TypeError, match="unknown input `masks`"):
        mha(**dict(inputs, masks=inputs["mask"]))
    with pytest.raises(TypeError, match="input `query` given twice"):
        mha(inputs["query"], **inputs)
    with pytest.raises(TypeError, match="takes 4 inputs"):
        mha(*inputs.values(), inputs["mask"])


def test_bad_options_are_value_errors():
    with pytest.raises(ValueError, match="backend"):
        attnc.compile(EXAMPLES / "mha.attn", backend="gpu")
    with pytest.raises(ValueError, match="threads"):
        attnc.compile(EXAMPLES / "mha.attn", threads=0)
    with pytest.raises(OSError, match="cannot read"):
        attnc.compile("no/such/file.attn")
