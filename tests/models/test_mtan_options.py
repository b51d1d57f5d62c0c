"""The attention and head options of MTANClassifier: kernel attention, learned + kernel scores, conv and GRU heads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.models.layers.attention import MultiTimeAttention, kernel_prior
from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.mtan import ATTENTIONS, HEADS, MTANClassifier, TemporalConvHead, TemporalGRUHead

OPTIONS = [(a, h) for a in ATTENTIONS for h in HEADS]
INTENSITY_OPTIONS = [("learned", "conv"), ("kernel", "flatten")]  # model.net.intensity=true


def make_net(backend: str = "linear", seed: int = 0, **kw) -> MTANClassifier:
    torch.manual_seed(seed)
    net = MTANClassifier(CHANNELS, num_classes=11, mlp=backend, **{**small_net_kwargs(), "conv_filters": 6, **kw})
    return net.eval()


def inputs(batch: dict) -> dict:
    return {m: v for m, v in batch.items() if m in CHANNELS}


def test_kernel_prior_values() -> None:
    prior = kernel_prior(torch.tensor([0.1, 0.5]), torch.tensor([[0.1, 0.3, 0.9]]), width=0.2)
    expected = torch.tensor([[[0.0, -1.0, -4.0], [-2.0, -1.0, -2.0]]])
    assert prior.shape == (1, 2, 3) and torch.allclose(prior, expected, atol=1e-6)
    with pytest.raises(ValueError, match="kernel_width"):
        kernel_prior(torch.zeros(2), torch.zeros(1, 3), width=0.0)


def test_kernel_attention_is_the_kernel_weighted_mean_of_valid_observations() -> None:
    """learned=False: out[q] = sum_t w_qt mask_t v_t / sum_t w_qt mask_t, w = exp(-|tau - ref| / width)."""
    g = torch.Generator().manual_seed(0)
    B, T, d, H, W, Q = 2, 6, 3, 2, 2, 4
    values = torch.randn(B, T, d, H, W, generator=g)
    mask = torch.rand(B, T, H, W, generator=g) < 0.6
    mask[0, :, 0, 0] = False  # a pixel without any valid date
    tau = torch.sort(torch.rand(B, T, generator=g), dim=1).values
    ref = (torch.arange(Q) + 0.5) / Q
    attention = MultiTimeAttention(embed_time=4, num_heads=2, learned=False)
    assert not list(attention.parameters())  # nothing to learn
    prior = kernel_prior(ref, tau, width=0.25)
    out, available = attention(values, mask, torch.zeros(Q, 4), torch.zeros(B, T, 4), prior=prior)
    assert out.shape == (B, Q, 2 * d, H, W)
    w = np.exp(-np.abs(tau.numpy()[:, None, :] - ref.numpy()[None, :, None]) / 0.25)  # (B, Q, T)
    m = mask.numpy().astype(float)
    for b in range(B):
        for i in range(H):
            for j in range(W):
                num = np.einsum("qt,t,tc->qc", w[b], m[b, :, i, j], values[b, :, :, i, j].numpy())
                den = (w[b] * m[b, :, i, j]).sum(-1, keepdims=True)
                want = num / den if m[b, :, i, j].any() else np.zeros_like(num)
                for head in range(2):  # both heads see the same prior
                    np.testing.assert_allclose(out[b, :, head * d : (head + 1) * d, i, j].numpy(), want, atol=1e-5)
    assert not bool(available[0, 0, 0]) and bool(torch.all(out[0, :, :, 0, 0] == 0))
    with pytest.raises(ValueError, match="prior"):
        attention(values, mask, torch.zeros(Q, 4), torch.zeros(B, T, 4))


def test_learned_kernel_scores_are_the_learned_scores_plus_the_prior() -> None:
    torch.manual_seed(0)
    attention = MultiTimeAttention(embed_time=8, num_heads=2, init="identity")
    ref_emb, time_emb = torch.randn(3, 8), torch.randn(2, 5, 8)
    prior = kernel_prior(torch.tensor([0.2, 0.5, 0.8]), torch.rand(2, 5), width=0.1)
    learned = attention.scores(ref_emb, time_emb)
    both = attention.scores(ref_emb, time_emb, prior)
    assert torch.allclose(both, learned + prior[:, None], atol=1e-6)


@pytest.mark.parametrize("attention,head", OPTIONS)
@pytest.mark.parametrize("backend", ["linear", "conv", "channels_last"])
def test_options_shapes_finite_and_equal_across_backends(attention: str, head: str, backend: str) -> None:
    ref = make_net("linear", attention=attention, head=head)
    other = make_net(backend, seed=1, attention=attention, head=head)
    other.load_state_dict(ref.state_dict())
    batch = inputs(random_batch(B=2, H=3, W=4))  # NaN under every False mask
    out = other(batch)
    assert out.shape == (2, 11, 3, 4) and torch.isfinite(out).all()
    assert torch.allclose(out, ref(batch), atol=1e-5), f"{(out - ref(batch)).abs().max()}"


@pytest.mark.parametrize(
    "attention,head,intensity,ref_values",
    [(a, h, False, False) for a, h in OPTIONS]
    + [("learned", "conv", True, False), ("learned", "conv", False, True), ("learned", "conv", False, "mean")],
)
def test_options_ignore_masked_values_and_padded_nan_dates(
    attention: str, head: str, intensity: bool, ref_values: bool | str
) -> None:
    net = make_net("channels_last", attention=attention, head=head, intensity=intensity, ref_values=ref_values)
    net.train()
    batch = inputs(random_batch(B=2, H=3, W=2))
    for m in batch:  # the last two dates are padding: valid nowhere, doy NaN
        batch[m]["mask"][:, -2:] = False
        batch[m]["doy"][:, -2:] = float("nan")
    batch["s2"]["mask"][0, :, 0, 0] = False  # an S2 pixel without any valid date
    other = {m: {k: v.clone() for k, v in d.items()} for m, d in batch.items()}
    for m in other:
        other[m]["x"] = torch.where(other[m]["mask"][:, :, None], other[m]["x"], torch.full_like(other[m]["x"], 7.0))
        other[m]["doy"][:, -2:] = 100.0
    torch.manual_seed(0)
    out = net(batch)
    out.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads.values())
    net.zero_grad()
    torch.manual_seed(0)
    out_other = net(other)
    assert torch.allclose(out, out_other, atol=1e-6)
    out_other.square().mean().backward()
    for n, p in net.named_parameters():
        assert torch.allclose(p.grad, grads[n], atol=1e-6), n


@pytest.mark.parametrize("attention,head", INTENSITY_OPTIONS)
@pytest.mark.parametrize("backend", ["conv", "channels_last"])
def test_intensity_shapes_and_equal_across_backends(attention: str, head: str, backend: str) -> None:
    ref = make_net("linear", attention=attention, head=head, intensity=True)
    # the output projection reads h*d + h features: the normalised values and each head's log mass
    assert ref.encoders["s2"].proj.get_parameter("fc1.weight").shape[1] == 2 * 8 + 2
    other = make_net(backend, seed=1, attention=attention, head=head, intensity=True)
    other.load_state_dict(ref.state_dict())
    batch = inputs(random_batch(B=2, H=3, W=4))
    out = other(batch)
    assert out.shape == (2, 11, 3, 4) and torch.isfinite(out).all()
    assert torch.allclose(out, ref(batch), atol=1e-5), f"{(out - ref(batch)).abs().max()}"


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("backend", ["conv", "channels_last"])
def test_ref_values_shapes_and_equal_across_backends(head: str, backend: str) -> None:
    ref = make_net("linear", head=head, ref_values=True)
    other = make_net(backend, seed=1, head=head, ref_values=True)
    other.load_state_dict(ref.state_dict())
    batch = inputs(random_batch(B=2, H=3, W=4))
    out = other(batch)
    assert out.shape == (2, 11, 3, 4) and torch.isfinite(out).all()
    assert torch.allclose(out, ref(batch), atol=1e-5), f"{(out - ref(batch)).abs().max()}"
    # sum(C_m + 1) = 11 + 4 + 4 interpolated features per reference time, beside the fused d = 8
    assert ref.reference_values(batch).shape == (2, 4, 19, 3, 4)
    if head == "conv":
        assert ref.conv_head.layers[0].in_channels == 8 + 19


def test_ref_values_interpolate_the_valid_observations_at_the_reference_times() -> None:
    torch.manual_seed(0)
    kw = {**small_net_kwargs(), "ref_values": True}
    net = MTANClassifier({"s2": 2}, num_classes=3, mlp="channels_last", **kw)  # 4 reference times over a year
    # reference times at the centres of 4 steps of 91.25 days: doy 45.625, 136.875, 228.125, 319.375
    x = torch.full((1, 4, 2, 1, 2), float("nan"))
    x[0, 0, :, 0, 0], x[0, 2, :, 0, 0] = 0.0, 10.0  # pixel 0: doy 40 -> 0, doy 140 -> 10; doy 90 masked
    x[0, 1, 1, 0, 0] = 5.0
    mask = torch.zeros(1, 4, 1, 2, dtype=torch.bool)
    mask[0, 0, 0, 0] = mask[0, 2, 0, 0] = True  # pixel 1: no valid observation; date 4 is padding
    doy = torch.tensor([[40.0, 90.0, 140.0, float("nan")]])
    out = net.reference_values({"s2": {"x": x, "doy": doy, "mask": mask}})  # (B, H, W, Q, C + 1)
    assert out.shape == (1, 1, 2, 4, 3) and torch.isfinite(out).all()
    np.testing.assert_allclose(out[0, 0, 0, :, 0], [0.5625, 9.6875, 10.0, 10.0], atol=1e-5)  # held after doy 140
    np.testing.assert_allclose(out[0, 0, 0, :, 1], out[0, 0, 0, :, 0], atol=1e-6)
    assert out[0, 0, 0, :, 2].tolist() == [1.0, 1.0, 0.0, 0.0]  # an observation within 45.6 days
    assert (out[0, 0, 1] == 0).all()  # no valid observation: 0, never near


def test_ref_values_mean_averages_the_valid_observations_within_half_a_reference_step() -> None:
    torch.manual_seed(0)
    kw = {**small_net_kwargs(), "ref_values": "mean"}
    net = MTANClassifier({"s2": 1}, num_classes=3, mlp="linear", **kw)  # 4 reference times over a year
    assert net.ref_values_mode == "mean" and net.reference_values is not None
    # windows of 91.25 days around doy 45.625, 136.875, 228.125, 319.375
    doy = torch.tensor([[10.0, 50.0, 70.0, 100.0, 300.0, float("nan")]])
    x = torch.tensor([2.0, 4.0, float("nan"), 9.0, 1.0, float("nan")]).view(1, 6, 1, 1, 1)
    mask = torch.tensor([True, True, False, True, True, False]).view(1, 6, 1, 1)
    out = net.reference_values({"s2": {"x": x, "doy": doy, "mask": mask}})  # (B, Q, C + 1, H, W)
    assert out.shape == (1, 4, 2, 1, 1) and torch.isfinite(out).all()
    # mean(2, 4); 9; the empty third window on the line from 9 (doy 100) to 1 (doy 300); 1
    third = 9.0 + (1.0 - 9.0) * (228.125 - 100.0) / 200.0
    np.testing.assert_allclose(out[0, :, 0, 0, 0], [3.0, 9.0, third, 1.0], atol=1e-5)
    assert out[0, :, 1, 0, 0].tolist() == [1.0, 1.0, 0.0, 1.0]
    linear = MTANClassifier({"s2": 1}, num_classes=3, mlp="linear", **{**kw, "ref_values": "linear"})
    assert (
        linear.ref_values_mode
        == MTANClassifier({"s2": 1}, 3, mlp="linear", **{**kw, "ref_values": True}).ref_values_mode
    )
    assert linear.reference_values({"s2": {"x": x, "doy": doy, "mask": mask}})[0, 0, 0, 0, 0] != 3.0


def test_ref_values_rejects_an_unknown_mode_before_building() -> None:
    with pytest.raises(ValueError, match=r"ref_values must be false, true \(= linear\), linear or mean; got 'median'"):
        MTANClassifier({"s2": 2}, num_classes=3, **{**small_net_kwargs(), "ref_values": "median"})


def test_kernel_attention_learns_no_scores_and_no_time_embedding() -> None:
    learned = make_net(attention="learned")
    kernel = make_net(attention="kernel")
    n_qk = sum(p.numel() for n, p in learned.named_parameters() if ".attention." in n)
    assert n_qk == len(CHANNELS) * 2 * (8 * 8 + 8)  # query and key Linear(E=8, E=8) per modality
    assert not [n for n, _ in kernel.named_parameters() if ".attention." in n]
    assert kernel.time_embedding is None  # every parameter gets a gradient (no unused ones under DDP)
    n_time = sum(p.numel() for p in learned.time_embedding.parameters())
    assert sum(p.numel() for p in kernel.parameters()) == sum(p.numel() for p in learned.parameters()) - n_qk - n_time


def test_kernel_width_is_in_reference_steps() -> None:
    net = make_net(attention="kernel", kernel_width=2.0, ref_range=(0.0, 2.0))
    assert math.isclose(net.kernel_tau, 2.0 * 2.0 / 4)  # 4 reference times over 2 years: steps of 0.5


def test_conv_head_orders_features_by_reference_time_in_both_layouts() -> None:
    torch.manual_seed(0)
    head = TemporalConvHead(d_model=3, filters=4, kernel_size=3, num_layers=2, dropout=0.0).eval()
    x = torch.randn(2, 5, 3, 2, 3)  # (B, Q, d, H, W)
    first = head(x, Format.CHANNELS_FIRST)
    last = head(x.permute(0, 3, 4, 1, 2), Format.CHANNELS_LAST)
    assert first.shape == (2, 5 * 4, 2, 3) and last.shape == (2, 2, 3, 5 * 4)
    assert torch.allclose(first.permute(0, 2, 3, 1), last, atol=1e-6)
    # pixel (1, 2) of sample 1 alone: the same features, q-major then filters
    alone = head.layers(x[1, :, :, 1, 2].T[None])  # (1, F, Q)
    assert torch.allclose(first[1, :, 1, 2], alone[0].T.reshape(-1), atol=1e-6)


def test_gru_head_gives_each_pixel_the_final_states_of_both_directions_in_both_layouts() -> None:
    torch.manual_seed(0)
    head = TemporalGRUHead(d_model=3, hidden=4).eval()
    x = torch.randn(2, 5, 3, 2, 3)  # (B, Q, d, H, W)
    first = head(x, Format.CHANNELS_FIRST)
    last = head(x.permute(0, 3, 4, 1, 2), Format.CHANNELS_LAST)
    assert first.shape == (2, 2 * 4, 2, 3) and last.shape == (2, 2, 3, 2 * 4)
    assert torch.allclose(first.permute(0, 2, 3, 1), last, atol=1e-6)
    # pixel (1, 2) of sample 1 alone: the forward state after reference time Q, the backward one after 1
    seq = x[1, :, :, 1, 2][None]  # (1, Q, d)
    outputs, _ = head.gru(seq)  # (1, Q, 2*hidden): forward then backward direction per time
    expected = torch.cat([outputs[0, -1, :4], outputs[0, 0, 4:]])
    assert torch.allclose(first[1, :, 1, 2], expected, atol=1e-6)
    # the head reads every reference time: changing the first one changes the forward state
    x2 = x.clone()
    x2[1, 0, :, 1, 2] += 1.0
    assert not torch.allclose(head(x2, Format.CHANNELS_FIRST)[1, :4, 1, 2], first[1, :4, 1, 2])
    assert make_net(head="gru", gru_hidden=5).head.get_parameter("fc1.weight").shape[1] == 10


def test_bad_options_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"model\.net\.attention"):
        make_net(attention="gaussian")
    with pytest.raises(ValueError, match=r"model\.net\.head"):
        make_net(head="pool")
    with pytest.raises(ValueError, match=r"model\.net\.kernel_width"):
        make_net(attention="kernel", kernel_width=0.0)
    with pytest.raises(ValueError, match="conv_kernel"):
        make_net(head="conv", conv_kernel=4)
    with pytest.raises(ValueError, match=r"model\.net\.gru_hidden"):
        make_net(head="gru", gru_hidden=0)


@pytest.mark.parametrize("backend", ["linear", "conv", "channels_last"])
def test_zero_hidden_widths_make_the_per_date_blocks_linear(backend: str) -> None:
    net = make_net(backend, input_hidden=0, fusion_hidden=0, head="conv")
    for block in [*(e.embed for e in net.encoders.values()), net.fusion]:
        assert [n for n, _ in block.named_children()] == ["fc1"]  # one projection, no activation
    # the embedding is linear in the bands: embed(a x + b y) = a embed(x) + b embed(y) - (a + b - 1) embed(0)
    embed = net.encoders["s2"].embed
    x, y = torch.randn(2, 3, CHANNELS["s2"], 2, 2), torch.randn(2, 3, CHANNELS["s2"], 2, 2)
    if embed.fmt == Format.CHANNELS_LAST:
        x, y = x.permute(0, 1, 3, 4, 2), y.permute(0, 1, 3, 4, 2)
    lhs = embed(2 * x - 0.5 * y)
    rhs = 2 * embed(x) - 0.5 * embed(y) - 0.5 * embed(torch.zeros_like(x))
    assert torch.allclose(lhs, rhs, atol=1e-5)
    ref = make_net("linear", input_hidden=0, fusion_hidden=0, head="conv")
    net.load_state_dict(ref.state_dict())
    batch = inputs(random_batch(B=2, H=3, W=2))  # NaN under every False mask
    out = net(batch)
    assert torch.isfinite(out).all() and torch.allclose(out, ref(batch), atol=1e-5)
    d = small_net_kwargs()["d_model"]
    n_embed = sum(p.numel() for p in embed.parameters())
    assert n_embed == CHANNELS["s2"] * d + d


def test_negative_hidden_widths_name_the_keys() -> None:
    with pytest.raises(ValueError, match=r"model\.net\.input_hidden.*input_hidden=-1"):
        make_net(input_hidden=-1)
    with pytest.raises(ValueError, match=r"fusion_hidden=-2"):
        make_net(fusion_hidden=-2)


@pytest.mark.parametrize("pool", ["mean", "attention", "similarity"])
@pytest.mark.parametrize("backend", ["conv", "channels_last"])
def test_spatial_context_equal_across_backends_and_doubles_the_head_input(backend: str, pool: str) -> None:
    per_pixel = make_net("linear", head="conv", ref_values=True)
    ref = make_net("linear", head="conv", ref_values=True, spatial_context=3, spatial_pool=pool)
    # the head reads Q*F = 4*6 features per pixel and as many pooled neighbourhood features
    assert per_pixel.head.get_parameter("fc1.weight").shape[1] == 24
    assert ref.head.get_parameter("fc1.weight").shape[1] == 48
    other = make_net(backend, seed=1, head="conv", ref_values=True, spatial_context=3, spatial_pool=pool)
    other.load_state_dict(ref.state_dict())
    batch = inputs(random_batch(B=2, H=4, W=5))  # NaN under every False mask
    out = other(batch)
    assert out.shape == (2, 11, 4, 5) and torch.isfinite(out).all()
    assert torch.allclose(out, ref(batch), atol=1e-5), f"{(out - ref(batch)).abs().max()}"


def test_spatial_context_with_zero_weights_on_the_means_is_the_per_pixel_network() -> None:
    per_pixel = make_net("linear", head="conv", ref_values=True)
    net = make_net("linear", head="conv", ref_values=True, spatial_context=3)
    state = per_pixel.state_dict()
    state["head.fc1.weight"] = torch.cat([state["head.fc1.weight"], torch.zeros_like(state["head.fc1.weight"])], 1)
    net.load_state_dict(state)
    batch = inputs(random_batch(B=2, H=4, W=5))
    assert torch.allclose(net(batch), per_pixel(batch), atol=1e-6)


@pytest.mark.parametrize("pool", ["mean", "attention", "similarity"])
def test_spatial_context_never_reads_pixels_without_data(pool: str) -> None:
    """A column without data weighs nothing: the other pixels score as if the window ended before it."""
    net = make_net("channels_last", head="conv", ref_values=True, spatial_context=3, spatial_pool=pool)
    batch = inputs(random_batch(B=1, H=3, W=4))
    for m in batch:  # the left column holds no data in any modality
        batch[m]["mask"][:, :, :, 0] = False
    cropped = {m: {"x": d["x"][..., 1:], "doy": d["doy"], "mask": d["mask"][..., 1:]} for m, d in batch.items()}
    assert net.pixels_with_data(batch)[0, :, 0].logical_not().all()
    out = net(batch)
    assert torch.isfinite(out).all()
    assert torch.allclose(out[..., 1:], net(cropped), atol=1e-6)
    wide = {m: {"x": d["x"], "doy": d["doy"], "mask": d["mask"].clone()} for m, d in batch.items()}
    wide["s2"]["mask"][:, 0, :, 0] = True  # had the column data, the pixels beside it would change
    assert not torch.allclose(net(wide)[..., 1], out[..., 1], atol=1e-4)


def test_unknown_spatial_pool_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"model\.net\.spatial_pool .*'max'"):
        make_net(spatial_context=3, spatial_pool="max")
