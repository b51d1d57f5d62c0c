import pytest
import torch
from einops import rearrange
from torch import nn

from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.layers.mlp import (
    BACKEND_CHOICES,
    MLP_BACKENDS,
    AutoMlp,
    ChannelsLastMlp,
    ConvMlp,
    LinearMlp,
    RowLinear,
    backend_name,
    mlp_class,
)

BACKENDS = list(MLP_BACKENDS)


def _build(backend, **kw):
    torch.manual_seed(0)
    ref = LinearMlp(6, (16, 12), 5, **kw)
    block = MLP_BACKENDS[backend](6, (16, 12), 5, **kw)
    block.load_state_dict(ref.state_dict())  # portable: any backend's weights load
    return ref, block


def _run(block, x):
    """Feed a channels-first tensor to a block in the layout it wants; return channels-first."""
    if block.fmt is Format.CHANNELS_LAST:
        return rearrange(block(rearrange(x, "b ... c h w -> b ... h w c")), "b ... h w c -> b ... c h w")
    return block(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_names_and_counts(backend):
    ref, block = _build(backend)
    assert list(ref.state_dict()) == list(block.state_dict())
    assert [n for n, _ in ref.named_children()] == [n for n, _ in block.named_children()]
    assert sum(p.numel() for p in block.parameters()) == 6 * 16 + 16 + 16 * 12 + 12 + 12 * 5 + 5
    assert block.fc1.weight.shape == ((16, 6, 1, 1) if backend == "conv" else (16, 6))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(2, 3, 6, 4, 5), (2, 6, 4, 5)])
def test_backends_equal_outputs_and_grads(backend, shape):
    ref, block = _build(backend)
    x1 = torch.randn(shape, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    o1, o2 = ref(x1), _run(block, x2)
    assert o1.shape == (*shape[:-3], 5, *shape[-2:])
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"
    g = torch.randn_like(o1)
    (o1 * g).sum().backward()
    (o2 * g).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5), f"{(x1.grad - x2.grad).abs().max()}"
    for (n, p1), (_, p2) in zip(ref.named_parameters(), block.named_parameters(), strict=True):
        assert torch.allclose(p1.grad, p2.grad.reshape(p1.grad.shape), atol=1e-4), n


@pytest.mark.parametrize("shape", [(2, 3, 6, 4, 5), (2, 6, 4, 5)])
def test_conv_runs_nhwc_under_cpu_bf16_autocast_with_the_same_result(shape):
    """Under CPU bf16 autocast the 1x1 convolutions get NHWC memory (oneDNN's fast bf16 path);
    in fp32 they keep NCHW. Outputs and gradients match the linear backend either way."""
    ref, block = _build("conv")
    seen: list[bool] = []
    block.fc1.register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous(memory_format=torch.channels_last)))
    x1 = torch.randn(shape, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o1, o2 = ref(x1), block(x2)
    assert seen == [True]
    assert o2.shape == o1.shape and o2.dtype == o1.dtype == torch.bfloat16
    assert torch.allclose(o1.float(), o2.float(), atol=3e-2, rtol=3e-2), f"{(o1.float() - o2.float()).abs().max()}"
    g = torch.randn(o1.shape)
    (o1.float() * g).sum().backward()
    (o2.float() * g).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=3e-2, rtol=3e-2), f"{(x1.grad - x2.grad).abs().max()}"
    block(x2.detach())  # fp32: NCHW as before
    assert seen == [True, False]


def test_state_dict_round_trip():
    lin, conv = _build("conv")
    assert conv.fc1.weight.shape == (16, 6, 1, 1)
    back = LinearMlp(6, (16, 12), 5)
    back.load_state_dict(conv.state_dict())  # (o, i, 1, 1) -> (o, i)
    for k, v in lin.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def test_true_mismatch_names_key_and_shapes():
    block = ConvMlp(6, (16,), 5)
    with pytest.raises(RuntimeError, match=r"fc1\.weight.*\[16, 7\].*\[16, 6, 1, 1\]"):
        block.load_state_dict(LinearMlp(7, (16,), 5).state_dict())


def test_wrong_channels_raise():
    with pytest.raises(ValueError, match=r"C=6.*\(2, 7, 4, 4\)"):
        LinearMlp(6, (), 5)(torch.randn(2, 7, 4, 4))
    with pytest.raises(ValueError, match="channels-first"):
        ConvMlp(6, (), 5)(torch.randn(2, 6))
    with pytest.raises(ValueError, match=r"channels-last.*C=6"):
        ChannelsLastMlp(6, (), 5)(torch.randn(2, 6, 4, 4))


def test_bad_construction_raises():
    with pytest.raises(ValueError, match="positive"):
        LinearMlp(0, (), 3)
    with pytest.raises(ValueError, match="drop"):
        ConvMlp(3, (4,), 3, drop=1.5)


def test_unknown_backend_lists_choices():
    with pytest.raises(ValueError, match=r"'convv'.*\['linear', 'conv', 'channels_last', 'auto'\]"):
        mlp_class("convv")
    assert list(MLP_BACKENDS) == ["linear", "conv", "channels_last"]
    assert BACKEND_CHOICES == ("linear", "conv", "channels_last", "auto")
    assert mlp_class("auto") is AutoMlp


@pytest.mark.parametrize("name", BACKEND_CHOICES)
def test_backend_name_resolved_from_every_form(name):
    """A name, the class, a partial (what mlp=... instantiates) and a Hydra config agree."""
    from functools import partial

    from omegaconf import OmegaConf

    cls = mlp_class(name)
    target = f"{cls.__module__}.{cls.__qualname__}"
    forms = [name, cls, partial(cls), OmegaConf.create({"_target_": target, "_partial_": True})]
    assert [backend_name(f) for f in forms] == [name] * 4
    with pytest.raises(ValueError, match="not an MLP class"):
        backend_name({"_target_": "torch.nn.Linear2"})
    with pytest.raises(ValueError, match="not an MLP backend"):
        backend_name(nn.Linear)


@pytest.mark.parametrize("bias", [True, False])
def test_row_linear_matches_nn_linear_with_gradients(bias):
    torch.manual_seed(0)
    ref = nn.Linear(3, 7, bias=bias)
    row = RowLinear(3, 7, bias=bias)
    row.load_state_dict(ref.state_dict())
    x = torch.randn(50, 3, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    ref(x).square().sum().backward()
    row(x2).square().sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), row.parameters(), strict=True):
        assert q.grad.shape == p.shape and torch.allclose(p.grad, q.grad, atol=1e-5), name
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = row(x2.detach())
    assert y.dtype == torch.bfloat16
