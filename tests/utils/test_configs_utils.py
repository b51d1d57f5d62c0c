"""Hydra overrides read as typed: interpolations in their values stay text."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError

from mtan_s1s2.utils.configs import typed_overrides


def test_an_interpolation_in_an_override_stays_as_typed():
    overrides = OmegaConf.create({"task": ["seed=1", "+cb.output_dir=${paths.output_dir}"]}).task
    with pytest.raises(InterpolationResolutionError):
        list(overrides)  # iterating resolves against the list's own root, which has no paths
    assert typed_overrides(overrides) == ["seed=1", "+cb.output_dir=${paths.output_dir}"]


def test_plain_sequences_and_none():
    assert typed_overrides(["mlp=conv", "seed=2"]) == ["mlp=conv", "seed=2"]
    assert typed_overrides(None) == []
    assert typed_overrides(OmegaConf.create([])) == []
