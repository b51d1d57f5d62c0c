import pytest
import torch

from mtan_s1s2.models.layers.mlp import (
    MLP_BACKENDS,
    ConvMlp,
    LinearMlp,
    convert_mlp_state_dict,
    count_parameters,
    get_mlp_backend,
)


def _pair(**kw):
    torch.manual_seed(0)
    lin = LinearMlp(6, (16, 12), 5, **kw)
    conv = ConvMlp(6, (16, 12), 5, **kw)
    conv.load_state_dict(convert_mlp_state_dict(lin.state_dict(), "conv"))
    return lin, conv


def test_same_names_and_counts():
    lin, conv = _pair()
    assert list(lin.state_dict()) == list(conv.state_dict())
    assert [n for n, _ in lin.named_children()] == [n for n, _ in conv.named_children()]
    assert count_parameters(lin) == count_parameters(conv) == 6 * 16 + 16 + 16 * 12 + 12 + 12 * 5 + 5
    assert lin.fc1.weight.shape == (16, 6) and conv.fc1.weight.shape == (16, 6, 1, 1)


@pytest.mark.parametrize("shape", [(2, 3, 6, 4, 5), (2, 6, 4, 5)])
def test_backends_equal_outputs_and_grads(shape):
    lin, conv = _pair()
    x1 = torch.randn(shape, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    o1, o2 = lin(x1), conv(x2)
    assert o1.shape == (*shape[:-3], 5, *shape[-2:])
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"
    g = torch.randn_like(o1)
    (o1 * g).sum().backward()
    (o2 * g).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5), f"{(x1.grad - x2.grad).abs().max()}"
    for (n, p1), (_, p2) in zip(lin.named_parameters(), conv.named_parameters()):
        assert torch.allclose(p1.grad, p2.grad.reshape(p1.grad.shape), atol=1e-4), n


def test_state_dict_round_trip():
    lin, conv = _pair()
    back = convert_mlp_state_dict(conv.state_dict(), "linear")
    for k, v in lin.state_dict().items():
        assert torch.equal(back[k], v)


def test_wrong_channels_raise():
    lin = LinearMlp(6, (), 5)
    with pytest.raises(ValueError, match=r"C=6.*\(2, 7, 4, 4\)"):
        lin(torch.randn(2, 7, 4, 4))
    with pytest.raises(ValueError, match="channels-first"):
        ConvMlp(6, (), 5)(torch.randn(2, 6))


def test_bad_construction_raises():
    with pytest.raises(ValueError, match="positive"):
        LinearMlp(0, (), 3)
    with pytest.raises(ValueError, match="drop"):
        ConvMlp(3, (4,), 3, drop=1.5)


def test_unknown_backend_lists_choices():
    with pytest.raises(ValueError, match=r"'convv'.*\['conv', 'linear'\]"):
        get_mlp_backend("convv")
    assert set(MLP_BACKENDS) == {"linear", "conv"}
