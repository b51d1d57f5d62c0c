"""torch.compile of the classifier: one graph, every backend, fp32 and bf16, same results as eager."""

from __future__ import annotations

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.lit_module import mark_dynamic_batch
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
    batches = [
        random_batch(seed=0),
        random_batch(B=3, T={"s2": 9, "s1_asc": 4, "s1_desc": 6}, seed=1),  # other batch size and date counts
        random_batch(B=2, T={"s2": 5, "s1_asc": 7, "s1_desc": 3}, seed=2),
    ]
    with torch._dynamo.config.patch(error_on_recompile=False):
        for i, batch in enumerate(batches):
            inputs = _inputs(batch)
            mark_dynamic_batch(inputs)
            with ctx:
                expected = net(inputs).float()
                out = compiled(inputs).float()
            assert torch.allclose(out, expected, atol=tol, rtol=tol), f"{(out - expected).abs().max()}"
            if i == 0:  # after the first trace, new shapes must not recompile
                torch._dynamo.config.error_on_recompile = True


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(MLP_BACKENDS))
def test_compiled_gradients_equal_eager(backend: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, mlp=backend, **small_net_kwargs()).eval()
    compiled = torch.compile(net, fullgraph=True)
    inputs = _inputs(random_batch(seed=3))
    net(inputs).square().mean().backward()
    expected = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    compiled(inputs).square().mean().backward()
    for n, p in net.named_parameters():
        assert torch.allclose(p.grad, expected[n], atol=1e-5, rtol=1e-4), f"{n}: {(p.grad - expected[n]).abs().max()}"
