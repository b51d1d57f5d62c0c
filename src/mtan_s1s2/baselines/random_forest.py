"""RandomForest on per-pixel time-series features: the reference every SITS classifier must beat.

``python train.py model=random_forest [data=...]`` fits it on the same training pixels,
split and normalisation as the mTAN model and writes the same metrics and files
(:mod:`mtan_s1s2.baselines.harness`). The features are the pixels' observations at a date
grid (:mod:`mtan_s1s2.baselines.features`); missing values (invalid observations) are
handled by scikit-learn's trees.

After Breiman, "Random Forests", Machine Learning 45, 2001; the usual SITS baseline
(e.g. Pelletier et al., "Temporal Convolutional Neural Network for the Classification of
Satellite Image Time Series", Remote Sensing 11, 2019).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from mtan_s1s2.baselines.base import FeatureBaseline, resolve_n_jobs
from mtan_s1s2.baselines.features import FeatureMode

CHECKPOINT_NAME = "random_forest.joblib"
"""File of a fitted forest in a run's ``checkpoints/`` folder (``eval.py ckpt_path=...`` reads it)."""


class RandomForestBaseline(FeatureBaseline):
    """A scikit-learn ``RandomForestClassifier`` with its feature settings.

    Args:
        n_estimators: Trees.
        max_features: Features tried per split (``"sqrt"``, a fraction, an int).
        min_samples_leaf: Minimum samples per leaf.
        class_weight: ``None``, ``"balanced"`` or ``"balanced_subsample"``.
        features: ``auto`` | ``raw`` | ``interpolated`` (:mod:`~mtan_s1s2.baselines.features`).
        step_days: Grid step of interpolated features, days.
        n_jobs: Parallel jobs of scikit-learn (-1: all cores).
        seed: Random state of the forest.

    Raises:
        ValueError: On ``n_estimators < 1`` or an unknown ``features`` mode.
    """

    backend: ClassVar[str] = "random_forest"

    def __init__(
        self,
        n_estimators: int = 500,
        max_features: str | float | int = "sqrt",
        min_samples_leaf: int = 1,
        class_weight: str | None = None,
        features: FeatureMode = "auto",
        step_days: float = 10.0,
        n_jobs: int = -1,
        seed: int = 0,
        spatial_context: int = 1,
    ) -> None:
        if int(n_estimators) < 1:
            raise ValueError(f"model.n_estimators must be >= 1, got {n_estimators}.")
        super().__init__(features, step_days, n_jobs, seed, spatial_context)
        self.params = {
            "n_estimators": int(n_estimators),
            "max_features": max_features,
            "min_samples_leaf": int(min_samples_leaf),
            "class_weight": class_weight,
            "n_jobs": int(n_jobs),
            "random_state": int(seed),
        }

    def _fit(
        self, features: np.ndarray, labels: np.ndarray, val_features: np.ndarray | None, val_labels: np.ndarray | None
    ) -> None:
        from sklearn.ensemble import RandomForestClassifier

        params = {**self.params, "n_jobs": resolve_n_jobs(self.n_jobs)}
        self.model = RandomForestClassifier(**params).fit(features, labels)

    def _predict_proba(self, features: np.ndarray) -> np.ndarray:
        proba: np.ndarray = self.model.predict_proba(features)
        return proba


__all__ = ["CHECKPOINT_NAME", "RandomForestBaseline"]
