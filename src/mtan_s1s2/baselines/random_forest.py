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

from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.baselines.features import DateGrid, FeatureMode

CHECKPOINT_NAME = "random_forest.joblib"
"""File of a fitted forest in a run's ``checkpoints/`` folder (``eval.py ckpt_path=...`` reads it)."""


class RandomForestBaseline:
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

    backend = "random_forest"

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
    ) -> None:
        if int(n_estimators) < 1:
            raise ValueError(f"model.n_estimators must be >= 1, got {n_estimators}.")
        if features not in ("auto", "raw", "interpolated"):
            raise ValueError(f"model.features must be auto, raw or interpolated, got {features!r}.")
        self.features: FeatureMode = features
        self.step_days = float(step_days)
        self.params: dict[str, Any] = {
            "n_estimators": int(n_estimators),
            "max_features": max_features,
            "min_samples_leaf": int(min_samples_leaf),
            "class_weight": class_weight,
            "n_jobs": int(n_jobs),
            "random_state": int(seed),
        }
        self.model: Any = None
        self.grid: DateGrid | None = None
        """The date grid of the training features, set by the harness before :meth:`fit`."""

    def fit(self, features: np.ndarray, labels: np.ndarray) -> RandomForestBaseline:
        """Fit on ``(N, F)`` features (NaN = missing) and ``(N,)`` class indices."""
        from sklearn.ensemble import RandomForestClassifier

        self.model = RandomForestClassifier(**self.params).fit(features, labels)
        return self

    def predict_proba(self, features: np.ndarray, num_classes: int) -> np.ndarray:
        """``(N, K)`` class probabilities (classes absent from training get 0).

        Raises:
            RuntimeError: If the forest is not fitted.
        """
        if self.model is None:
            raise RuntimeError("RandomForestBaseline.fit must be called before predicting.")
        out = np.zeros((features.shape[0], num_classes), np.float32)
        out[:, self.model.classes_] = self.model.predict_proba(features)
        return out

    def save(self, path: str | Path) -> Path:
        """Write the fitted forest and its date grid with ``joblib`` (scikit-learn's documented persistence).

        Returns:
            ``path``.

        Raises:
            RuntimeError: If the forest is not fitted.
        """
        import joblib

        if self.model is None:
            raise RuntimeError("RandomForestBaseline.fit must be called before saving.")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        joblib.dump(self, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> RandomForestBaseline:
        """The forest :meth:`save` wrote.

        ``joblib`` files are pickles: load only files you trust (those your own runs wrote).

        Raises:
            ValueError: If the file does not hold a fitted :class:`RandomForestBaseline`.
        """
        import joblib

        obj = joblib.load(Path(path))
        if not isinstance(obj, cls) or obj.model is None or obj.grid is None:
            raise ValueError(
                f"{Path(path).absolute()} does not hold a fitted {cls.__name__} with its date grid "
                f"(got {type(obj).__name__}); give the {CHECKPOINT_NAME} of a model=random_forest run."
            )
        return obj

    def __repr__(self) -> str:
        return f"{type(self).__name__}(features={self.features!r}, {self.params})"


__all__ = ["CHECKPOINT_NAME", "RandomForestBaseline"]
