"""With PyTorch, where it is installed: its tensors in place, its state_dict as weights,
and its own module as the judge."""

import numpy as np
import pytest

import attnc
from conftest import EXAMPLES

torch = pytest.importorskip("torch")


class SeedModule(torch.nn.Module):
    """The Annotated Transformer's MultiHeadedAttention, as `examples/mha.attn` reads it."""

    def __init__(self, d, h):
        super().__init__()
        self.h, self.dk = h, d // h
        self.linears = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(4)])

    def forward(self, query, key, value, mask):
        b = query.size(0)
        q, k, v = [
            lin(x).view(b, -1, self.h, self.dk).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        scores = q @ k.transpose(-2, -1) / self.dk**0.5
        p = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9).softmax(-1)
        x = (p @ v).transpose(1, 2).contiguous().view(b, -1, self.h * self.dk)
        return self.linears[3](x), p


def test_a_state_dict_and_torch_tensors_give_pytorchs_outputs():
    torch.manual_seed(0)
    module = SeedModule(32, 4).eval()
    f = attnc.compile(EXAMPLES / "mha.attn", dims={"D": 32, "H": 4}, weights=module.state_dict(), threads=2)
    q, k = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    v = torch.randn(2, 7, 32)
    mask = torch.ones(2, 1, 7)
    mask[1, 0, 5:] = 0
    with torch.no_grad():
        out, attn = module(q, k, v, mask)
    got = f(query=q, key=k, value=v, mask=mask)
    np.testing.assert_allclose(got["out"], out.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["attn"], attn.numpy(), rtol=1e-4, atol=1e-6)
    assert f._input_addresses(q, k, v, mask) == [t.data_ptr() for t in (q, k, v, mask)]
    assert torch.from_numpy(got["out"]).data_ptr() == got["out"].ctypes.data


def test_a_tensor_that_requires_grad_is_refused_clearly():
    f = attnc.compile(EXAMPLES / "mha.attn", dims={"D": 16, "H": 4})
    x = torch.randn(1, 3, 16, requires_grad=True)
    with pytest.raises(TypeError, match="input `query`: cannot read the tensor through `__dlpack__`"):
        f(query=x, key=x, value=x, mask=torch.ones(1, 1, 3))
