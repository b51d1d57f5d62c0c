import pytest
import torch

from fixtures.reference_attention import reference_multi_time_attention
from mtan_s1s2.models.layers.attention import MultiTimeAttention
from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.layers.time_embedding import TimeEmbedding


def _setup(B=2, T=9, d=5, H=4, W=3, p=0.6, seed=0):
    torch.manual_seed(seed)
    emb = TimeEmbedding(8)
    attn = MultiTimeAttention(8, 2)
    values = torch.randn(B, T, d, H, W)
    mask = torch.rand(B, T, H, W) < p
    mask[0, :, 0, 0] = False  # a pixel with no valid date
    mask[1, -2:] = False  # two padding dates
    tau = torch.sort(torch.rand(B, T), dim=1).values
    ref = emb(torch.linspace(0.05, 0.95, 6))
    return attn, values, mask, ref, emb(tau)


def test_factorised_equals_reference():
    attn, v, m, ref, te = _setup()
    out, available = attn(v, m, ref, te)
    expected = reference_multi_time_attention(attn, v, m, ref, te)
    assert out.shape == (2, 6, 2 * 5, 4, 3)
    assert torch.allclose(out, expected, atol=1e-5), f"{(out - expected).abs().max()}"
    assert torch.equal(available, m.any(1))
    assert torch.all(out[0, :, :, 0, 0] == 0)


def test_channels_last_layout_equals_reference():
    attn, v, m, ref, te = _setup()
    out, available = attn(v.permute(0, 1, 3, 4, 2).contiguous(), m, ref, te, fmt=Format.CHANNELS_LAST)
    expected = reference_multi_time_attention(attn, v, m, ref, te)  # (B, Q, h*d, H, W)
    assert out.shape == (2, 4, 3, 6, 2 * 5)  # (B, H, W, Q, h*d)
    assert torch.allclose(out, expected.permute(0, 3, 4, 1, 2), atol=1e-5)
    assert torch.equal(available, m.any(1))


def test_large_scores_stay_finite_and_exact():
    attn, v, m, ref, te = _setup(seed=1)
    with torch.no_grad():
        attn.key.weight.mul_(30.0)  # scores spanning hundreds: naive exp overflows
    out, _ = attn(v, m, ref, te)
    expected = reference_multi_time_attention(attn, v, m, ref, te)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, expected, atol=1e-4), f"{(out - expected).abs().max()}"


def test_no_valid_date_gives_zero_and_finite_grad():
    attn, v, m, ref, te = _setup()
    m = torch.zeros_like(m)
    v.requires_grad_(True)
    out, available = attn(v, m, ref, te)
    out.sum().backward()
    assert torch.all(out == 0) and not available.any()
    assert torch.isfinite(v.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters() if p.grad is not None)


def test_bf16_autocast_is_fp32_inside():
    attn, v, m, ref, te = _setup()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = attn(v.bfloat16(), m, ref, te)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_time_embedding_frequencies_span_phenology():
    emb = TimeEmbedding(64)
    cycles = emb.periodic.weight.squeeze(1) / (2 * torch.pi)
    assert abs(cycles.min().item() - 0.5) < 1e-4 and abs(cycles.max().item() - 12.0) < 1e-3
    assert emb(torch.zeros(3, 5)).shape == (3, 5, 64)


def test_identity_init_attends_to_nearby_dates() -> None:
    """attention_init=identity: each reference time's largest weight is on its nearest date."""
    from mtan_s1s2.models.layers.time_embedding import TimeEmbedding

    torch.manual_seed(0)
    emb = TimeEmbedding(64)
    ref = (torch.arange(12) + 0.5) / 12
    dates = torch.arange(12, dtype=torch.float32) / 12 + 0.01  # monthly
    weights = {}
    for init in ("default", "identity"):
        att = MultiTimeAttention(64, 2, init=init)
        weights[init] = att.scores(emb(ref), emb(dates)[None]).softmax(-1)[0]  # (h, Q, T)
    assert float(weights["default"].max(-1).values.mean()) < 0.15  # nearly uniform: ~1/12
    assert float(weights["identity"].max(-1).values.mean()) > 0.3
    nearest = torch.arange(12)
    assert ((weights["identity"].argmax(-1) - nearest).abs() <= 1).all()  # both heads, up to the random phases
    with pytest.raises(ValueError, match=r"attention_init must be one of"):
        MultiTimeAttention(64, 2, init="orthogonal")


def _direct_log_mass(attn, m, ref, te):
    """Per-pixel log-sum-exp of the scores over the valid dates, (B, Q, h, H, W); 0 without any."""
    B, T, H, W = m.shape
    s = attn.scores(ref, te)[..., None, None].expand(-1, -1, -1, -1, H, W)  # (B, h, Q, T, H, W)
    lse = torch.logsumexp(s.double().masked_fill(~m[:, None, None], float("-inf")), dim=3)
    return torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).permute(0, 2, 1, 3, 4).float()


@pytest.mark.parametrize("channels_last", [False, True])
def test_intensity_appends_the_log_mass_on_valid_dates(channels_last):
    attn, v, m, ref, te = _setup()
    with_mass = MultiTimeAttention(8, 2, intensity=True)
    with_mass.load_state_dict(attn.state_dict())  # the same scores
    fmt = Format.CHANNELS_LAST if channels_last else Format.CHANNELS_FIRST
    vin = v.permute(0, 1, 3, 4, 2).contiguous() if channels_last else v
    out, available = with_mass(vin, m, ref, te, fmt=fmt)
    if channels_last:
        out = out.permute(0, 3, 4, 1, 2)  # (B, Q, C, H, W)
    assert out.shape == (2, 6, 2 * 5 + 2, 4, 3)
    # the normalised output is unchanged; the last h channels are each head's log mass
    assert torch.allclose(out[:, :, :10], reference_multi_time_attention(attn, v, m, ref, te), atol=1e-5)
    mass = out[:, :, 10:]
    direct = _direct_log_mass(attn, m, ref, te)
    assert torch.allclose(mass, direct, atol=1e-5), f"{(mass - direct).abs().max()}"
    assert torch.all(mass[0, :, :, 0, 0] == 0) and torch.equal(available, m.any(1))
    # a pixel that loses a valid date has less mass at every reference time, with the same dates
    b, i, j = 1, 2, 1
    t = int(torch.nonzero(m[b, :, i, j])[0])
    fewer = m.clone()
    fewer[b, t, i, j] = False
    out_fewer, _ = with_mass(v, fewer, ref, te)
    assert torch.all(out_fewer[b, :, 10:, i, j] < mass[b, :, :, i, j])


def test_intensity_gradients_are_finite_without_valid_dates():
    attn, v, m, ref, te = _setup()
    with_mass = MultiTimeAttention(8, 2, intensity=True)
    m = m.clone()
    m[1] = False  # a sample with no valid date at all
    out, _ = with_mass(v, m, ref, te)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.all(out[1] == 0)
    assert all(torch.isfinite(p.grad).all() for p in with_mass.parameters())
