import json

import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.models.backend_selection import select_backend, time_backends
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.mtan import MTANClassifier


def _net():
    torch.manual_seed(0)
    return MTANClassifier(CHANNELS, 11, mlp="auto", **small_net_kwargs())


def test_auto_starts_linear():
    net = _net()
    assert net.requested_backend == "auto" and net.backend == "linear"


def test_time_backends_covers_all_and_leaves_net_alone():
    net = _net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    timings = time_backends(net, random_batch(), torch.device("cpu"), repeats=1, warmup=0)
    assert set(timings) == set(MLP_BACKENDS) and all(t > 0 for t in timings.values())
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
