"""MetagrossFFN, the position-wise METAGROSS of the METAGROSS paper section 2.3, against a recursive
loop written from it; gradcheck; a Transformer layer with it as its feed-forward block. Its
non-finite, empty-batch and autocast cases are with every layer's (``contract.py``)."""

from __future__ import annotations

import pytest
import torch

from ctrlrnn import MetagrossFFN

D64 = torch.float64


def paper_ffn(m, x):
    """Section 2.3 for one position vector x (d,), recursively, from the module's weights."""
    d, N, I = m.d_model, m.num_nodes, m.num_internal
    W, b = m.weight, m.bias

    def F_(gate, node):
        k = gate * N + node
        return W[k * d : (k + 1) * d] @ x + b[k * d : (k + 1) * d]

    if m.depth_gate == "token":
        g = torch.sigmoid(W[3 * N * d :] @ x + b[3 * N * d :])
    else:
        g = torch.sigmoid(m.depth_logit) if I else None

    def unit(node, level):
        if level < m.depth:
            a, bt = g[node], g[I + node]
            f = torch.sigmoid(a * unit(2 * node + 1, level + 1) + (1 - a) * F_(0, node))
            o = torch.sigmoid(bt * unit(2 * node + 2, level + 1) + (1 - bt) * F_(1, node))
        else:
            f, o = torch.sigmoid(F_(0, node)), torch.sigmoid(F_(1, node))
        z = torch.tanh(F_(2, node))
        h = f * x + o * z
        return h + x if m.residual else h

    return unit(0, 1)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("depth_gate,residual", [("token", True), ("scalar", False)])
def test_ffn_matches_paper(depth, depth_gate, residual):
    torch.manual_seed(13)
    m = MetagrossFFN(4, depth, depth_gate=depth_gate, residual=residual).double()
    x = torch.randn(2, 3, 4, dtype=D64)
    out = m(x)
    assert out.shape == x.shape
    for i in range(2):
        for j in range(3):
            torch.testing.assert_close(out[i, j], paper_ffn(m, x[i, j]))
    torch.testing.assert_close(m(x[0, 0]), out[0, 0])  # any leading shape, position-wise


def test_ffn_gradcheck_and_transformer_drop_in():
    torch.manual_seed(14)
    m = MetagrossFFN(3, 2).double()
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in m.named_parameters())
    x = torch.randn(2, 2, 3, dtype=D64, requires_grad=True)

    def f(x, *ps):
        return torch.func.functional_call(m, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(lambda x: f(x, *params), (x,))
    assert torch.autograd.gradcheck(f, (x, *params), fast_mode=True)

    class Block(torch.nn.Module):  # a pre-norm Transformer layer with METAGROSS as its FFN
        def __init__(self, d):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(d, 2, batch_first=True)
            self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.ffn = MetagrossFFN(d, 2, residual=False)

        def forward(self, x):
            y = self.n1(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.ffn(self.n2(x))

    blk = Block(8)
    y = blk(torch.randn(2, 5, 8))
    assert y.shape == (2, 5, 8)
    y.sum().backward()
    assert blk.ffn.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="x: expected"):
        m(torch.randn(2, 4, dtype=D64))
    with pytest.raises(ValueError, match="depth_gate"):
        MetagrossFFN(3, 2, depth_gate="static")
