import copy

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.models.mtan import MTANClassifier


def make_net(backend="linear", channels=CHANNELS, seed=0, **kw):
    torch.manual_seed(seed)
    net = MTANClassifier(channels, num_classes=11, mlp=backend, **{**small_net_kwargs(), **kw})
    return net.eval()


def test_output_shape_and_finite():
    net = make_net()
    out = net(random_batch(B=3, H=6, W=5))
    assert out.shape == (3, 11, 6, 5)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("backend", ["conv", "channels_last"])
def test_backends_equal_outputs_and_gradients(backend):
    lin = make_net("linear")
    other = make_net(backend, seed=1)
    other.load_state_dict(lin.state_dict())  # portable: linear weights load into any backend
    assert other.backend == backend
    assert sum(p.numel() for p in lin.parameters()) == sum(p.numel() for p in other.parameters())
    batch = random_batch()
    o1, o2 = lin(batch), other(batch)
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"
    o1.square().mean().backward()
    o2.square().mean().backward()
    for (n, p1), (_, p2) in zip(lin.named_parameters(), other.named_parameters(), strict=True):
        g1, g2 = p1.grad, p2.grad.reshape(p1.grad.shape)
        assert torch.allclose(g1, g2, atol=1e-5, rtol=1e-4), f"{n}: {(g1 - g2).abs().max()}"


@pytest.mark.parametrize("src", ["linear", "conv", "channels_last"])
@pytest.mark.parametrize("dst", ["linear", "conv", "channels_last"])
def test_state_dict_of_any_backend_loads_into_any_other(src, dst):
    a, b = make_net(src, seed=0), make_net(dst, seed=1)
    b.load_state_dict(a.state_dict())
    batch = random_batch()
    o1, o2 = a(batch), b(batch)
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"


def test_set_backend_keeps_outputs():
    net = make_net("linear")
    batch = random_batch()
    expected = net(batch)
    for backend in ("channels_last", "conv", "linear"):
        net.set_backend(backend)
        assert net.backend == backend
        out = net(batch)
        assert torch.allclose(out, expected, atol=1e-5), f"{backend}: {(out - expected).abs().max()}"
    with pytest.raises(ValueError, match="auto"):
        net.set_backend("auto")


def test_mismatched_state_dict_names_key_and_shapes():
    small = make_net("conv")
    other = MTANClassifier({"s2": 9, "s1_asc": 3, "s1_desc": 3}, num_classes=11, mlp="linear", **small_net_kwargs())
    with pytest.raises(RuntimeError, match=r"encoders\.s2\.embed\.fc1\.weight.*\[8, 9\].*\[8, 10, 1, 1\]"):
        small.load_state_dict(other.state_dict())


@pytest.mark.parametrize("backend", ["linear", "conv", "channels_last"])
def test_every_parameter_gets_a_gradient(backend):
    net = make_net(backend).train()
    out = net(random_batch())
    out.mean().backward()
    for n, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, n


@pytest.mark.parametrize("backend", ["linear", "channels_last"])
def test_values_under_false_mask_are_ignored(backend):
    net = make_net(backend)
    batch = random_batch(nan_under_mask=True)
    other = copy.deepcopy(batch)
    for m in ("s2", "s1_asc", "s1_desc"):
        x, mask = other[m]["x"], other[m]["mask"]
        other[m]["x"] = torch.where(mask[:, :, None], x, torch.full_like(x, 1e6))
    o1, o2 = net(batch), net(other)
    assert torch.isfinite(o1).all()
    assert torch.allclose(o1, o2, atol=1e-6), f"{(o1 - o2).abs().max()}"


def test_padding_dates_do_not_change_logits():
    net = make_net()
    batch = random_batch()
    padded = copy.deepcopy(batch)
    for m in ("s2", "s1_asc"):
        x, doy, mask = padded[m]["x"], padded[m]["doy"], padded[m]["mask"]
        B, T, C, H, W = x.shape
        padded[m]["x"] = torch.cat([x, torch.full((B, 3, C, H, W), float("nan"))], 1)
        padded[m]["doy"] = torch.cat([doy, torch.full((B, 3), 400.0)], 1)
        padded[m]["mask"] = torch.cat([mask, torch.zeros(B, 3, H, W, dtype=torch.bool)], 1)
    o1, o2 = net(batch), net(padded)
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"


def test_joint_permutation_of_dates_does_not_change_logits():
    net = make_net()
    batch = random_batch()
    perm = copy.deepcopy(batch)
    for m in ("s2", "s1_asc", "s1_desc"):
        T = perm[m]["doy"].shape[1]
        idx = torch.randperm(T, generator=torch.Generator().manual_seed(3))
        for k in ("x", "doy", "mask"):
            perm[m][k] = perm[m][k][:, idx]
    o1, o2 = net(batch), net(perm)
    assert torch.allclose(o1, o2, atol=1e-5), f"{(o1 - o2).abs().max()}"


def test_dates_matter():
    net = make_net()
    batch = random_batch()
    shifted = copy.deepcopy(batch)
    shifted["s2"]["doy"] = shifted["s2"]["doy"] + 60.0
    assert not torch.allclose(net(batch), net(shifted), atol=1e-4)


@pytest.mark.parametrize("backend", ["linear", "conv", "channels_last"])
def test_pixel_without_any_valid_date_is_finite(backend):
    net = make_net(backend).train()
    batch = random_batch()
    for m in ("s2", "s1_asc", "s1_desc"):
        batch[m]["mask"][:, :, 0, 0] = False
    batch["s1_desc"]["mask"][:] = False  # a modality without any valid date
    out = net(batch)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())


def test_missing_modality_in_config_is_supported():
    net = make_net(channels={"s2": 10})
    batch = random_batch(T={"s2": 4})
    assert net(batch).shape == (2, 11, 6, 5)


def test_wrong_channel_count_names_shape_and_key():
    net = make_net()
    batch = random_batch()
    batch["s2"]["x"] = batch["s2"]["x"][:, :, :9]
    with pytest.raises(ValueError, match=r"\(B, T, C=10, H, W\).*model\.net\.in_channels\.s2"):
        net(batch)


def test_missing_time_axis_raises():
    net = make_net()
    batch = random_batch()
    batch["s1_asc"]["x"] = batch["s1_asc"]["x"][:, 0]
    with pytest.raises(ValueError, match=r"s1_asc\.x must have shape \(B, T, C=3, H, W\)"):
        net(batch)


def test_missing_modality_in_batch_raises():
    net = make_net()
    batch = random_batch(T={"s2": 4})
    with pytest.raises(ValueError, match=r"data\.modalities"):
        net(batch)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="s3"):
        MTANClassifier({"s3": 4}, 11)
    with pytest.raises(ValueError, match="convv"):
        MTANClassifier(CHANNELS, 11, mlp="convv")
    with pytest.raises(ValueError, match="divisible"):
        MTANClassifier(CHANNELS, 11, embed_time=7, num_heads=2)


@pytest.mark.parametrize("backend", ["linear", "conv", "channels_last"])
def test_bf16_autocast_finite_with_fully_masked_pixels(backend):
    from mtan_s1s2.models.losses import masked_cross_entropy

    net = make_net(backend).train()
    batch = random_batch()
    for m in ("s2", "s1_asc", "s1_desc"):
        batch[m]["mask"][:, :, :2, :] = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(batch)
        loss = masked_cross_entropy(logits, batch["label"], 0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.float()).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())


@pytest.mark.parametrize("backend", ["linear", "conv", "channels_last"])
def test_nan_doy_on_padded_dates_gives_finite_gradients(backend):
    net = make_net(backend).train()
    batch = random_batch(B=2)
    for m in ("s2", "s1_asc"):  # the last two dates: padding, masked at every pixel, doy NaN
        batch[m]["mask"][:, -2:] = False
        batch[m]["doy"][:, -2:] = float("nan")
    reference = copy.deepcopy(batch)
    for m in ("s2", "s1_asc"):
        reference[m]["doy"][:, -2:] = 123.0  # any value: it must not matter
    torch.manual_seed(0)
    out = net(batch)
    out.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    assert torch.isfinite(out).all()
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), name
    net.zero_grad()
    torch.manual_seed(0)
    out_ref = net(reference)
    out_ref.square().mean().backward()
    assert torch.allclose(out, out_ref, atol=1e-6), f"{(out - out_ref).abs().max()}"
    for name, p in net.named_parameters():
        assert torch.allclose(p.grad, grads[name], atol=1e-6), name


def test_head_norm_is_the_same_in_every_backend(make_batch) -> None:
    """head_norm=true: one LayerNorm per pixel, whatever the layout; checkpoints load across backends."""
    torch.manual_seed(0)
    batch = make_batch(B=2, H=3, W=2)
    inputs = {m: batch[m] for m in ("s2", "s1_asc", "s1_desc")}
    ref = MTANClassifier(CHANNELS, 11, mlp="linear", head_norm=True, attention_init="identity", **small_net_kwargs())
    ref.eval()
    out = ref(inputs)
    for backend in ("conv", "channels_last"):
        other = MTANClassifier(
            CHANNELS, 11, mlp=backend, head_norm=True, attention_init="identity", **small_net_kwargs()
        )
        other.load_state_dict(ref.state_dict())
        other.eval()
        assert torch.allclose(other(inputs), out, atol=1e-5), f"{backend}: {(other(inputs) - out).abs().max()}"
    ref.set_backend("channels_last")
    assert torch.allclose(ref(inputs), out, atol=1e-5)


def test_padded_dates_change_no_output() -> None:
    """pad_dates (the compiled model's static date counts) appends invalid dates only."""
    from mtan_s1s2.data.batch import pad_dates

    torch.manual_seed(0)
    net = make_net("linear").eval()
    inputs = {m: v for m, v in random_batch(B=2).items() if m != "label"}
    padded = pad_dates(inputs, 8)
    assert all(v["x"].shape[1] == 8 and v["mask"].shape[1] == 8 and v["doy"].shape[1] == 8 for v in padded.values())
    assert not padded["s2"]["mask"][:, 7:].any() and padded["s2"]["doy"].shape == (2, 8)
    assert torch.allclose(net(padded), net(inputs), atol=1e-6)
    assert pad_dates(inputs, 1)["s2"]["x"] is inputs["s2"]["x"]
