"""MiniRocket and MultiRocket-Hydra (aeon): random convolution kernels and a ridge classifier per pixel series.

``python train.py model=minirocket [data=...]`` (or ``model=multirocket_hydra``) fits on the
same training pixels, split and normalisation as ``model=random_forest`` and writes the same
metrics and files (:mod:`~mtan_s1s2.baselines.harness`).

Rocket transforms need regular, complete series. Each pixel becomes one multivariate series
``(C_all, G)`` of every channel of every modality at one shared date grid
(:mod:`~mtan_s1s2.baselines.features`, ``series`` layout): the samples' own dates when every
sample and modality share them (pixel tables), else a regular grid every ``step_days`` over
the training dates; invalid observations are filled by linear interpolation in time between
the pixel's valid ones (held constant before the first and after the last), and a pixel
without any valid observation of a modality gets 0 there (the training mean, as the values
are normalised). Series shorter than 9 dates (MiniRocket's kernel length) are padded at the
end with their last value.

aeon's classifiers fit a ``RidgeClassifierCV`` (regularisation chosen by leave-one-out
cross-validation on the training pixels), which gives no probabilities: ``predict_proba``
(and so ``probabilities.tif`` / ``confidence.tif`` of ``predict.py``) is 1 for the predicted
class and 0 elsewhere.

Needs ``aeon`` (``pip install 'mtan-s1s2[baselines]'``). After Dempster et al., "MiniRocket",
KDD 2021, and "Hydra: competing convolutional kernels", DMKD 2023.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from mtan_s1s2.baselines.base import FeatureBaseline, require, resolve_n_jobs
from mtan_s1s2.baselines.features import FeatureMode, Layout, as_series

MIN_DATES = 9
"""Shortest series MiniRocket accepts (its kernel length); shorter ones are edge-padded."""


def pad_series(series: np.ndarray, length: int = MIN_DATES) -> np.ndarray:
    """``(N, C, T)`` series padded at the end to ``length`` dates with their last value (unchanged if longer)."""
    if series.shape[2] >= length:
        return series
    return np.pad(series, ((0, 0), (0, 0), (0, length - series.shape[2])), mode="edge")


class _RocketBaseline(FeatureBaseline):
    """An aeon convolution-based classifier on the pixels' multivariate series."""

    layout: ClassVar[Layout] = "series"
    predict_rows: ClassVar[int] = 4096  # MiniRocket: ~10,000 float32 features per pixel while predicting
    option: ClassVar[str] = ""
    estimator_name: ClassVar[str] = ""

    def __init__(self, features: FeatureMode, step_days: float, n_jobs: int, seed: int) -> None:
        require("aeon.classification.convolution_based", f"model={self.option}", "aeon")
        super().__init__(features, step_days, n_jobs, seed)

    def _series(self, features: np.ndarray) -> np.ndarray:
        if self.grid is None:
            raise RuntimeError(f"{type(self).__name__} has no date grid: the harness sets it before fitting.")
        return pad_series(as_series(features, self.grid))

    def _fit(
        self, features: np.ndarray, labels: np.ndarray, val_features: np.ndarray | None, val_labels: np.ndarray | None
    ) -> None:
        module = require("aeon.classification.convolution_based", f"model={self.option}", "aeon")
        estimator = getattr(module, self.estimator_name)
        params = {**self.params, "n_jobs": resolve_n_jobs(self.n_jobs)}
        self.model = estimator(**params).fit(self._series(features), labels)

    def _predict_proba(self, features: np.ndarray) -> np.ndarray:
        proba: np.ndarray = self.model.predict_proba(self._series(features))
        return proba


class MiniRocketBaseline(_RocketBaseline):
    """aeon's ``MiniRocketClassifier``: MiniRocket features, scaled, and a ridge classifier.

    Args:
        n_kernels: Features of the transform (84 kernels x dilations x biases).
        max_dilations_per_kernel: Most dilations per kernel.
        class_weight: ``None`` or ``"balanced"`` (of the ridge classifier).
        features: ``auto`` | ``raw`` | ``interpolated`` (the date grid of the series).
        step_days: Grid step of interpolated series, days.
        n_jobs: Threads (-1: every core this process may use).
        seed: ``random_state`` (the training series the biases are drawn from).

    Raises:
        ImportError: If aeon is not installed (naming the pip command).
        ValueError: On ``n_kernels < 84``.
    """

    backend: ClassVar[str] = "minirocket"
    option: ClassVar[str] = "minirocket"
    estimator_name: ClassVar[str] = "MiniRocketClassifier"

    def __init__(
        self,
        n_kernels: int = 10000,
        max_dilations_per_kernel: int = 32,
        class_weight: str | None = None,
        features: FeatureMode = "auto",
        step_days: float = 10.0,
        n_jobs: int = -1,
        seed: int = 0,
    ) -> None:
        if int(n_kernels) < 84:
            raise ValueError(f"model.n_kernels must be >= 84 (MiniRocket's base kernels), got {n_kernels}.")
        super().__init__(features, step_days, n_jobs, seed)
        self.params = {
            "n_kernels": int(n_kernels),
            "max_dilations_per_kernel": int(max_dilations_per_kernel),
            "class_weight": class_weight,
            "n_jobs": int(n_jobs),
            "random_state": int(seed),
        }


class MultiRocketHydraBaseline(_RocketBaseline):
    """aeon's ``MultiRocketHydraClassifier``: Hydra and MultiRocket features, one ridge classifier.

    Args:
        n_kernels: Kernels per group of the Hydra transform.
        n_groups: Groups per dilation of the Hydra transform.
        class_weight: ``None`` or ``"balanced"`` (of the ridge classifier).
        features: ``auto`` | ``raw`` | ``interpolated`` (the date grid of the series).
        step_days: Grid step of interpolated series, days.
        n_jobs: Threads (-1: every core this process may use).
        seed: ``random_state`` of both transforms.

    Raises:
        ImportError: If aeon is not installed (naming the pip command).
        ValueError: On a non-positive kernel or group count.
    """

    backend: ClassVar[str] = "multirocket_hydra"
    option: ClassVar[str] = "multirocket_hydra"
    estimator_name: ClassVar[str] = "MultiRocketHydraClassifier"

    def __init__(
        self,
        n_kernels: int = 8,
        n_groups: int = 64,
        class_weight: str | None = None,
        features: FeatureMode = "auto",
        step_days: float = 10.0,
        n_jobs: int = -1,
        seed: int = 0,
    ) -> None:
        for key, value in (("n_kernels", n_kernels), ("n_groups", n_groups)):
            if int(value) < 1:
                raise ValueError(f"model.{key} must be >= 1, got {value}.")
        super().__init__(features, step_days, n_jobs, seed)
        self.params = {
            "n_kernels": int(n_kernels),
            "n_groups": int(n_groups),
            "class_weight": class_weight,
            "n_jobs": int(n_jobs),
            "random_state": int(seed),
        }


__all__ = ["MIN_DATES", "MiniRocketBaseline", "MultiRocketHydraBaseline", "pad_series"]
