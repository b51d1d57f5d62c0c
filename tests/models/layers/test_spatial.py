"""NeighbourhoodMean: each pixel's features blended with the mean of its neighbours holding data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.layers.spatial import NeighbourhoodMean


def test_blend_is_the_mean_over_valid_neighbours_inside_the_window() -> None:
    g = torch.Generator().manual_seed(0)
    B, C, H, W = 2, 3, 4, 5
    x = torch.randn(B, C, H, W, generator=g)
    valid = torch.rand(B, H, W, generator=g) < 0.7
    valid[1] = False
    valid[1, 2, 3] = True  # one pixel with data: the only one in every mean of sample 1
    layer = NeighbourhoodMean(C, 3)
    alpha = torch.tensor([0.0, 0.5, 1.0])
    with torch.no_grad():
        layer.alpha.copy_(alpha)
    out = layer(x, valid)
    xn, vn = x.numpy(), valid.numpy()
    want = np.empty_like(xn)
    for b in range(B):
        for i in range(H):
            for j in range(W):
                rows, cols = slice(max(i - 1, 0), i + 2), slice(max(j - 1, 0), j + 2)
                v = vn[b, rows, cols]
                mean = xn[b, :, rows, cols][:, v].mean(-1) if v.any() else xn[b, :, i, j]
                want[b, :, i, j] = xn[b, :, i, j] + alpha.numpy() * (mean - xn[b, :, i, j])
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-6)
    # sample 1: where the 3x3 neighbourhood reaches the pixel with data, alpha=1 gives its features
    np.testing.assert_allclose(out[1, 2, 1:, 2:].detach().numpy(), np.broadcast_to(xn[1, 2, 2, 3], (3, 3)), rtol=1e-6)
    np.testing.assert_allclose(out[1, 2, 0, :].detach().numpy(), xn[1, 2, 0, :])  # no data around: unchanged


def test_starts_as_the_identity_and_learns_alpha() -> None:
    x = torch.randn(1, 4, 5, 5)
    layer = NeighbourhoodMean(4, 5)
    out = layer(x)
    assert torch.equal(out, x)
    out.square().sum().backward()
    assert layer.alpha.grad is not None and (layer.alpha.grad != 0).all()


def test_channels_last_equals_channels_first() -> None:
    x = torch.randn(2, 6, 4, 3)
    valid = torch.rand(2, 4, 3) < 0.5
    first, last = NeighbourhoodMean(6, 3), NeighbourhoodMean(6, 3, Format.CHANNELS_LAST)
    with torch.no_grad():
        first.alpha.uniform_()
        last.alpha.copy_(first.alpha)
    out = last(x.movedim(1, -1), valid)
    assert out.shape == (2, 4, 3, 6)
    assert torch.allclose(out.movedim(-1, 1), first(x, valid), atol=1e-6)


def test_a_single_pixel_is_unchanged() -> None:
    """Pixel tables (H = W = 1): the only neighbour is the pixel itself."""
    layer = NeighbourhoodMean(3, 3)
    with torch.no_grad():
        layer.alpha.fill_(0.8)
    x = torch.randn(7, 3, 1, 1)
    assert torch.allclose(layer(x), x)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_bad_kernel_size_names_the_key(k: int) -> None:
    with pytest.raises(ValueError, match=rf"model.net.spatial_context .* got {k}"):
        NeighbourhoodMean(3, k)
