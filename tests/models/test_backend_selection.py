import json

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.models import backend_selection
from mtan_s1s2.models.backend_selection import select_backend, time_backend_samples
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.mtan import MTANClassifier


def _net():
    torch.manual_seed(0)
    return MTANClassifier(CHANNELS, 11, mlp="auto", **small_net_kwargs())


def test_auto_starts_linear():
    net = _net()
    assert net.requested_backend == "auto" and net.backend == "linear"


def test_time_backend_samples_covers_all_and_leaves_net_alone():
    net = _net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    samples = time_backend_samples(net, random_batch(), torch.device("cpu"), repeats=1, warmup=0)
    assert set(samples) == set(MLP_BACKENDS) and all(len(s) == 1 and s[0] > 0 for s in samples.values())
    assert net.backend == "linear"
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_select_backend_switches_records_and_caches(tmp_path):
    cache = tmp_path / "auto.json"
    batch = random_batch()
    net = _net().eval()  # no dropout: outputs comparable
    expected = net(batch)
    result = select_backend(net, batch, torch.device("cpu"), repeats=1, cache_file=cache)
    assert result["choice"] == min(result["timings_ms"], key=result["timings_ms"].get)
    assert net.backend == result["choice"] and not result["cached"]
    assert torch.allclose(net(batch), expected, atol=1e-5)
    stored = json.loads(cache.read_text())
    assert stored[result["key"]]["choice"] == result["choice"]
    again = select_backend(_net(), batch, torch.device("cpu"), repeats=1, cache_file=cache)
    assert again["cached"] and again["choice"] == result["choice"] and again["cost_s"] == 0.0


def _scripted_steps(monkeypatch, ms_per_backend):
    """Replace the timed step by scripted times per backend; returns the list of calls."""
    calls = []

    def fake_step(candidate, inputs, device, ctx):
        calls.append(candidate.backend)
        return ms_per_backend[candidate.backend]

    monkeypatch.setattr(backend_selection, "_time_step", fake_step)
    return calls


def test_clearly_slower_backend_is_pruned_after_one_timed_step(monkeypatch):
    calls = _scripted_steps(monkeypatch, {"linear": 10.0, "conv": 30.0, "channels_last": 12.0})
    samples = time_backend_samples(_net(), random_batch(), torch.device("cpu"), repeats=3, warmup=1, prune_ratio=1.25)
    assert samples == {"linear": [10.0] * 3, "conv": [30.0], "channels_last": [12.0] * 3}
    assert calls.count("conv") == 2 and calls.count("linear") == calls.count("channels_last") == 4  # warm-up + timed
    result = select_backend(_net(), random_batch(), torch.device("cpu"), prune_ratio=1.25)
    assert result["timings_ms"] == {"linear": 10.0, "conv": 30.0, "channels_last": 12.0}
    assert result["choice"] == "linear"


def test_no_pruning_times_every_backend_fully(monkeypatch):
    _scripted_steps(monkeypatch, {"linear": 10.0, "conv": 30.0, "channels_last": 12.0})
    samples = time_backend_samples(_net(), random_batch(), torch.device("cpu"), repeats=2, warmup=0, prune_ratio=None)
    assert {b: len(s) for b, s in samples.items()} == {"linear": 2, "conv": 2, "channels_last": 2}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"repeats": 0}, "repeats"), ({"warmup": -1}, "warmup"), ({"prune_ratio": 0.9}, "prune_ratio")],
)
def test_time_backend_samples_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        time_backend_samples(_net(), random_batch(), torch.device("cpu"), **kwargs)


def test_select_backend_records_samples_of_pruned_backends(monkeypatch):
    _scripted_steps(monkeypatch, {"linear": 11.0, "conv": 30.0, "channels_last": 8.0})
    net = _net()
    result = select_backend(net, random_batch(), torch.device("cpu"), repeats=3)
    assert result["choice"] == net.backend == "channels_last"
    assert result["samples_ms"] == {"linear": [11.0], "conv": [30.0], "channels_last": [8.0] * 3}
    assert result["timings_ms"] == {"linear": 11.0, "conv": 30.0, "channels_last": 8.0}
