"""TempCNN (Pelletier et al., 2019): shapes, gradients, masks, configuration errors."""

from __future__ import annotations

import pytest
import torch

from mtan_s1s2.models.tempcnn import TempCNN


def _batch(B: int = 3, T: int = 6, H: int = 2, W: int = 1, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for m, c in (("s2", 4), ("s1", 2)):
        mask = torch.rand(B, T, H, W, generator=g) < 0.7
        x = torch.randn(B, T, c, H, W, generator=g).masked_fill(~mask[:, :, None], float("nan"))
        out[m] = {"x": x, "doy": torch.arange(T).float().expand(B, T), "mask": mask}
    return out


def test_logits_gradients_and_masked_values() -> None:
    torch.manual_seed(0)
    net = TempCNN({"s2": 4, "s1": 2}, num_classes=5, seq_len={"s2": 6, "s1": 6}, filters=8, hidden=16)
    batch = _batch()
    logits = net(batch)
    assert logits.shape == (3, 5, 2, 1) and torch.isfinite(logits).all()
    logits.sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    net.eval()
    other = {
        m: {**v, "x": torch.where(v["mask"][:, :, None], v["x"], torch.full_like(v["x"], 7.0))}
        for m, v in batch.items()
    }
    torch.testing.assert_close(net(batch), net(other))  # values under a False mask are never read
    assert net.backend == "tempcnn" and net.modalities == ["s2", "s1"]


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match=r"needs the same number of dates"):
        TempCNN({"s2": 4, "s1": 2}, 5, seq_len={"s2": 6, "s1": 7})
    with pytest.raises(ValueError, match=r"kernel_size must be odd"):
        TempCNN({"s2": 4}, 5, seq_len=6, kernel_size=4)
    net = TempCNN({"s2": 4, "s1": 2}, 5, seq_len=6)
    with pytest.raises(ValueError, match=r"s2.x must have shape \(B, T=6, C=4, H, W\)"):
        net(_batch(T=5))
