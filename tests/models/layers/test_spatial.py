"""The neighbourhood pools (mean, attention, similarity): each pixel's features pooled over its neighbours with data."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.layers.spatial import NeighbourhoodAttention, NeighbourhoodMean, NeighbourhoodSimilarity


def test_the_mean_is_over_valid_neighbours_inside_the_window() -> None:
    g = torch.Generator().manual_seed(0)
    B, C, H, W = 2, 3, 4, 5
    x = torch.randn(B, C, H, W, generator=g)
    valid = torch.rand(B, H, W, generator=g) < 0.7
    valid[1] = False
    valid[1, 2, 3] = True  # one pixel with data: the only one in every mean of sample 1
    out = NeighbourhoodMean(3)(x, valid)
    xn, vn = x.numpy(), valid.numpy()
    want = np.empty_like(xn)
    for b in range(B):
        for i in range(H):
            for j in range(W):
                rows, cols = slice(max(i - 1, 0), i + 2), slice(max(j - 1, 0), j + 2)
                v = vn[b, rows, cols]
                want[b, :, i, j] = xn[b, :, rows, cols][:, v].mean(-1) if v.any() else xn[b, :, i, j]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    # sample 1: where the 3x3 neighbourhood reaches the pixel with data, the mean is its features
    np.testing.assert_allclose(out[1, :, 1:, 2:].numpy(), np.broadcast_to(xn[1, :, 2, 3, None, None], (3, 3, 3)))
    np.testing.assert_allclose(out[1, :, 0, :].numpy(), xn[1, :, 0, :])  # no data around: its own features


def test_every_pixel_valid_is_the_box_mean_with_the_window_border_left_out() -> None:
    x = torch.arange(25.0).reshape(1, 1, 5, 5)
    out = NeighbourhoodMean(5)(x)
    assert out[0, 0, 2, 2] == pytest.approx(12.0)  # the whole window
    assert out[0, 0, 0, 0] == pytest.approx(np.mean([0, 1, 2, 5, 6, 7, 10, 11, 12]))


def test_channels_last_equals_channels_first() -> None:
    x = torch.randn(2, 6, 4, 3)
    valid = torch.rand(2, 4, 3) < 0.5
    out = NeighbourhoodMean(3, Format.CHANNELS_LAST)(x.movedim(1, -1), valid)
    assert out.shape == (2, 4, 3, 6)
    assert torch.allclose(out.movedim(-1, 1), NeighbourhoodMean(3)(x, valid), atol=1e-6)


def test_a_single_pixel_is_its_own_mean() -> None:
    """Pixel tables (H = W = 1): the only neighbour is the pixel itself."""
    x = torch.randn(7, 3, 1, 1)
    assert torch.allclose(NeighbourhoodMean(3)(x), x)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_bad_kernel_size_names_the_key(k: int) -> None:
    with pytest.raises(ValueError, match=rf"model.net.spatial_context .* got {k}"):
        NeighbourhoodMean(k)


def attention_with_zero_scores(channels: int, k: int = 3) -> NeighbourhoodAttention:
    layer = NeighbourhoodAttention(channels, k)
    for proj in (layer.query, layer.key):
        torch.nn.init.zeros_(proj.weight)
        torch.nn.init.zeros_(proj.bias)
    return layer


def test_attention_with_equal_scores_is_the_neighbourhood_mean() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 5, 6, generator=g)
    valid = torch.rand(2, 5, 6, generator=g) < 0.6
    valid[1] = False  # no data anywhere: every pixel keeps its own features
    out = attention_with_zero_scores(4)(x, valid)
    assert torch.allclose(out, NeighbourhoodMean(3)(x, valid), atol=1e-6)
    assert torch.equal(out[1], x[1])


def test_attention_weighs_the_neighbours_by_their_offset_bias() -> None:
    """A large bias on the window's centre: each pixel holding data reads (almost) its own features."""
    x = torch.arange(12.0).reshape(1, 1, 3, 4)
    layer = attention_with_zero_scores(1)
    with torch.no_grad():
        layer.offset_bias[4] = 30.0  # the centre of the 3 x 3 window
    assert torch.allclose(layer(x), x, atol=1e-6)
    with torch.no_grad():  # the centre and its right neighbour alike, twice e^0 elsewhere
        layer.offset_bias.zero_()
        layer.offset_bias[4] = layer.offset_bias[5] = 30.0
        out = layer(x)
    assert out[0, 0, 1, 1] == pytest.approx((5.0 + 6.0) / 2, abs=1e-5)
    assert out[0, 0, 1, 3] == pytest.approx(7.0, abs=1e-5)  # the right neighbour lies outside the image


def test_attention_never_reads_pixels_without_data() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 5, 4, 4, generator=g)
    valid = torch.ones(1, 4, 4, dtype=torch.bool)
    valid[0, :, 0] = False
    layer = NeighbourhoodAttention(5, 3)
    changed = x.clone()
    changed[0, :, :, 0] = 1e6  # features of the pixels without data
    assert torch.allclose(layer(changed, valid)[..., 1:], layer(x, valid)[..., 1:], atol=1e-6)


def test_attention_gradients_stay_finite_where_nothing_holds_data() -> None:
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    valid = torch.zeros(2, 4, 4, dtype=torch.bool)
    valid[0, 1:3, 1:3] = True
    layer = NeighbourhoodAttention(3, 3)
    layer(x, valid).square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())


def test_attention_channels_last_equals_channels_first() -> None:
    x = torch.randn(2, 6, 4, 3)
    valid = torch.rand(2, 4, 3) < 0.5
    first = NeighbourhoodAttention(6, 3)
    last = NeighbourhoodAttention(6, 3, Format.CHANNELS_LAST)
    last.load_state_dict(first.state_dict())
    out = last(x.movedim(1, -1), valid)
    assert out.shape == (2, 4, 3, 6)
    assert torch.allclose(out.movedim(-1, 1), first(x, valid), atol=1e-6)


@pytest.mark.parametrize("k", [1, 2])
def test_attention_bad_kernel_size_names_the_key(k: int) -> None:
    with pytest.raises(ValueError, match=r"model.net.spatial_context"):
        NeighbourhoodAttention(4, k)


def test_similarity_at_zero_temperature_is_the_neighbourhood_mean() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 5, 6, generator=g)
    valid = torch.rand(2, 5, 6, generator=g) < 0.6
    valid[1] = False
    out = NeighbourhoodSimilarity(3)(x, valid)
    assert torch.allclose(out, NeighbourhoodMean(3)(x, valid), atol=1e-6)
    assert torch.equal(out[1], x[1])


def test_similarity_weighs_neighbours_by_the_cosine_of_their_features() -> None:
    """Two parcels side by side: with temperature t a pixel weighs a neighbour by exp(t * cos)."""
    x = torch.zeros(1, 2, 1, 3)
    x[0, :, 0, 0] = torch.tensor([1.0, 0.0])  # parcel A
    x[0, :, 0, 1] = torch.tensor([2.0, 0.0])  # parcel A, brighter: cosine 1 with the left pixel
    x[0, :, 0, 2] = torch.tensor([0.0, 3.0])  # parcel B: cosine 0 with both
    layer = NeighbourhoodSimilarity(3)
    with torch.no_grad():
        layer.temperature.fill_(2.0)
    out = layer(x)
    e = math.exp(2.0)
    # the middle pixel: itself and its left neighbour weigh e^2 each, the right one e^0
    expected = (e * x[0, :, 0, 0] + e * x[0, :, 0, 1] + x[0, :, 0, 2]) / (2 * e + 1)
    assert torch.allclose(out[0, :, 0, 1], expected, atol=1e-5)
    # the right pixel (parcel B) reads itself at e^2 against e^0 for its parcel-A neighbour
    expected_b = (e * x[0, :, 0, 2] + x[0, :, 0, 1]) / (e + 1)
    assert torch.allclose(out[0, :, 0, 2], expected_b, atol=1e-5)
    with torch.no_grad():  # a large temperature: each parcel reads only its own pixels
        layer.temperature.fill_(60.0)
    out = layer(x)
    assert torch.allclose(out[0, :, 0, 1], (x[0, :, 0, 0] + x[0, :, 0, 1]) / 2, atol=1e-5)
    assert torch.allclose(out[0, :, 0, 2], x[0, :, 0, 2], atol=1e-5)


def test_similarity_never_reads_pixels_without_data_and_keeps_gradients_finite() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 5, 4, 4, generator=g)
    valid = torch.ones(1, 4, 4, dtype=torch.bool)
    valid[0, :, 0] = False
    layer = NeighbourhoodSimilarity(3)
    with torch.no_grad():
        layer.temperature.fill_(3.0)
    changed = x.clone()
    changed[0, :, :, 0] = 1e6
    assert torch.allclose(layer(changed, valid)[..., 1:], layer(x, valid)[..., 1:], atol=1e-6)
    zeros = torch.zeros(2, 3, 4, 4, requires_grad=True)  # all-zero features: cosine 0, no NaN
    none = torch.zeros(2, 4, 4, dtype=torch.bool)
    none[0, 1:3, 1:3] = True
    layer(zeros, none).square().sum().backward()
    assert zeros.grad is not None and torch.isfinite(zeros.grad).all()
    assert layer.temperature.grad is not None and torch.isfinite(layer.temperature.grad)


def test_similarity_channels_last_equals_channels_first() -> None:
    x = torch.randn(2, 6, 4, 3)
    valid = torch.rand(2, 4, 3) < 0.5
    first = NeighbourhoodSimilarity(3)
    with torch.no_grad():
        first.temperature.fill_(1.5)
        first.offset_bias.copy_(torch.linspace(-1, 1, 9))
    last = NeighbourhoodSimilarity(3, Format.CHANNELS_LAST)
    last.load_state_dict(first.state_dict())
    out = last(x.movedim(1, -1), valid)
    assert torch.allclose(out.movedim(-1, 1), first(x, valid), atol=1e-6)
