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


def test_date_grid_reads_any_dates_and_never_the_masked_values() -> None:
    torch.manual_seed(0)
    net = TempCNN({"s2": 4, "s1": 2}, 5, seq_len=None, date_range=[0.0, 60.0], date_step_days=10.0, filters=8,
                  hidden=16).eval()  # fmt: skip
    assert net.seq_len is None and net.num_dates == 7 and net.grid is not None
    assert net.grid.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    for T in (5, 9):  # any number of dates per call: the series is interpolated at the 7 grid dates
        batch = _batch(T=T)
        for m in batch:
            batch[m]["doy"] = torch.linspace(0, 60, T).expand(3, T)
        logits = net(batch)
        assert logits.shape == (3, 5, 2, 1) and torch.isfinite(logits).all()
    other = {
        m: {**v, "x": torch.where(v["mask"][:, :, None], v["x"], torch.full_like(v["x"], 7.0))}
        for m, v in batch.items()
    }
    torch.testing.assert_close(net(batch), net(other))
    # dates in another order, the same observations: the same series on the grid
    order = torch.randperm(9)
    shuffled = {m: {"x": v["x"][:, order], "doy": v["doy"][:, order], "mask": v["mask"][:, order]}
                for m, v in batch.items()}  # fmt: skip
    torch.testing.assert_close(net(batch), net(shuffled))


def test_date_grid_series_and_observed_channel() -> None:
    net = TempCNN({"s1": 1}, 3, seq_len=None, date_range=[0.0, 20.0], date_step_days=10.0)
    x = torch.tensor([0.0, float("nan"), 4.0]).view(1, 3, 1, 1, 1)
    mask = torch.tensor([True, False, True]).view(1, 3, 1, 1)
    values, observed = net.on_grid(x, torch.tensor([[0.0, 9.0, 20.0]]), mask)
    torch.testing.assert_close(values.flatten(), torch.tensor([0.0, 2.0, 4.0]))
    assert observed.flatten().tolist() == [True, False, True]  # day 9 was masked: day 10 is interpolated


def test_date_grid_errors() -> None:
    with pytest.raises(ValueError, match=r"model.net.seq_len\) or the first and last doy.*got date_range=None"):
        TempCNN({"s2": 4}, 5, seq_len=None)
    with pytest.raises(ValueError, match=r"step_days must be > 0"):
        TempCNN({"s2": 4}, 5, seq_len=None, date_range=[0, 10], date_step_days=0)
    net = TempCNN({"s2": 4, "s1": 2}, 5, seq_len=None, date_range=[0, 10])
    batch = _batch()
    batch["s1"]["x"] = batch["s1"]["x"][:, :, :1]
    with pytest.raises(ValueError, match=r"s1.x must have shape \(B, T, C=2, H, W\) \(model.net.in_channels.s1\)"):
        net(batch)


def test_spatial_context_reads_the_neighbours_holding_data_only() -> None:
    """The dense layer reads twice the features; zero weights on the means give the per-pixel network back."""
    per_pixel = TempCNN({"s2": 4, "s1": 2}, 5, seq_len=6, filters=8, hidden=16).eval()
    net = TempCNN({"s2": 4, "s1": 2}, 5, seq_len=6, filters=8, hidden=16, spatial_context=3).eval()
    assert net.dense[0].in_features == 2 * per_pixel.dense[0].in_features == 2 * 8 * 6
    state = per_pixel.state_dict()
    state["dense.0.weight"] = torch.cat([state["dense.0.weight"], torch.zeros_like(state["dense.0.weight"])], 1)
    net.load_state_dict(state)
    batch = _batch(B=2, H=3, W=4)
    torch.testing.assert_close(net(batch), per_pixel(batch))
    # with weights on the means: a column without data in any modality changes no other pixel's logits
    torch.manual_seed(1)
    net = TempCNN({"s2": 4, "s1": 2}, 5, seq_len=6, filters=8, hidden=16, spatial_context=3).eval()
    for v in batch.values():
        v["mask"][..., 0] = False
    cropped = {m: {"x": v["x"][..., 1:], "doy": v["doy"], "mask": v["mask"][..., 1:]} for m, v in batch.items()}
    out = net(batch)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[..., 1:], net(cropped))
    assert not torch.allclose(out[..., 1:], per_pixel(batch)[..., 1:], atol=1e-3)


@pytest.mark.parametrize("k", [2, "auto"])
def test_bad_spatial_context_names_the_key(k: object) -> None:
    with pytest.raises(ValueError, match=r"model\.net\.spatial_context"):
        TempCNN({"s2": 4}, 5, seq_len=6, spatial_context=k)  # type: ignore[arg-type]
