"""torch.compile of the classifier: one graph per date multiple, every backend, fp32 and bf16, as eager."""

from __future__ import annotations

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.models.compiling import compiled_inputs
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.mtan import MTANClassifier


def _inputs(batch: dict) -> dict:
    return {m: batch[m] for m in CHANNELS}


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("backend", list(MLP_BACKENDS))
def test_compiled_equals_eager_without_graph_breaks_or_recompiles(backend: str, precision: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, mlp=backend, **small_net_kwargs()).eval()
    compiled = torch.compile(net, fullgraph=True)  # fullgraph: a graph break raises
    ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    tol = 1e-4 if precision == "fp32" else 3e-2  # bf16 keeps ~3 significant digits
    batches = [  # other batch sizes and date counts within the same multiples of 8 (16, 8, 8)
        random_batch(T={"s2": 9, "s1_asc": 5, "s1_desc": 6}, seed=0),
        random_batch(B=3, T={"s2": 16, "s1_asc": 4, "s1_desc": 8}, seed=1),
        random_batch(B=2, T={"s2": 12, "s1_asc": 7, "s1_desc": 3}, seed=2),
    ]
    with torch._dynamo.config.patch(error_on_recompile=False):
        for i, batch in enumerate(batches):
            inputs = _inputs(batch)
            with ctx:
                expected = net(inputs).float()
                out = compiled(compiled_inputs(inputs)).float()
            assert torch.allclose(out, expected, atol=tol, rtol=tol), f"{(out - expected).abs().max()}"
            if i == 0:  # after the first trace, new shapes must not recompile
                torch._dynamo.config.error_on_recompile = True


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(MLP_BACKENDS))
def test_compiled_gradients_equal_eager(backend: str) -> None:
    """Training steps on two date counts: the conv backend's backward once failed on the second."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, mlp=backend, **small_net_kwargs()).eval()  # eval: no dropout draws
    compiled = torch.compile(net, fullgraph=True)
    for seed, T in ((3, {"s2": 9, "s1_asc": 5, "s1_desc": 6}), (4, {"s2": 11, "s1_asc": 7, "s1_desc": 5})):
        inputs = _inputs(random_batch(B=2 + seed % 2, T=T, seed=seed))
        net.zero_grad()
        net(inputs).square().mean().backward()
        expected = {n: p.grad.clone() for n, p in net.named_parameters()}
        net.zero_grad()
        compiled(compiled_inputs(inputs)).square().mean().backward()
        for n, p in net.named_parameters():
            diff = (p.grad - expected[n]).abs().max()
            assert torch.allclose(p.grad, expected[n], atol=1e-5, rtol=1e-4), f"{n}: {diff}"
