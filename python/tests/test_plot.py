"""`attnc.plot`: the PNG the command line writes, shown by a notebook."""

import pytest

import attnc
from conftest import EXAMPLES, FIXTURES, PAD, read_safetensors, run_cli


def test_plot_is_the_png_the_command_line_writes(tmp_path):
    out = tmp_path / "out.safetensors"
    done = run_cli(
        "run", EXAMPLES / "mha.attn", "--dim", "D=16", "--dim", "H=4",
        "--weights", FIXTURES / f"weights_{PAD}.safetensors",
        "--inputs", FIXTURES / f"inputs_{PAD}.safetensors", "-o", out,
    )
    assert done.returncode == 0, done.stderr
    png = tmp_path / "attn.png"
    done = run_cli("plot", out, "--tensor", "attn", "--batch", "1", "--heads", "1..3", "-o", png)
    assert done.returncode == 0, done.stderr
    attn = read_safetensors(out)["attn"]
    image = attnc.plot(attn, "attn", batch=1, heads=(1, 3))
    assert bytes(image) == png.read_bytes()
    assert image._repr_png_().startswith(b"\x89PNG")


def test_a_tensor_that_cannot_be_drawn_is_a_run_error():
    import numpy as np

    with pytest.raises(attnc.RunError, match="attn"):
        attnc.plot(np.zeros(3, np.float32), "attn")
