"""What every feature baseline shares: its feature settings, fitting, probabilities, its model file.

A baseline (:class:`FeatureBaseline`) is a classifier of fixed-length per-pixel features
(:mod:`~mtan_s1s2.baselines.features`): the harness (:mod:`~mtan_s1s2.baselines.harness`)
sets its date grid and the data contract, fits it on the training pixels and saves it to
``checkpoints/<backend>.joblib`` with everything prediction needs: the fitted estimator,
the date grid and the data contract (bands, radiometry, normalisation statistics, class
names; :func:`~mtan_s1s2.data.datamodule.data_contract`), so ``eval.py`` and
``predict.py ckpt_path=<file>`` feed other data exactly as in training.

``joblib`` files are pickles: load only files you trust (those your own runs wrote).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mtan_s1s2.baselines.features import DateGrid, FeatureMode, Layout, check_spatial_context

BASELINES_EXTRA = "pip install 'mtan-s1s2[baselines]'"
"""The install command of the optional baseline libraries (LightGBM, aeon)."""


def require(module: str, option: str, package: str) -> Any:
    """Import ``module`` of an optional baseline library, or fail naming the install command.

    Args:
        module: Module to import (``lightgbm``, ``aeon.classification.convolution_based``).
        option: The config option that needs it (``model=lightgbm``).
        package: The PyPI package (``lightgbm``, ``aeon``).

    Raises:
        ImportError: If the library is not installed; the message names the pip commands.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{option} needs the {package} library, which is not installed ({err}). Install the baseline extras "
            f"with {BASELINES_EXTRA} (or pip install {package})."
        ) from None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a SLURM allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def resolve_n_jobs(n_jobs: int) -> int:
    """``n_jobs`` as a positive thread count: ``-1`` = every available core, ``-k`` = all but ``k - 1``.

    Raises:
        ValueError: On 0.
    """
    n_jobs = int(n_jobs)
    if n_jobs == 0:
        raise ValueError("model.n_jobs must be a positive thread count or -1 (every core), got 0.")
    return n_jobs if n_jobs > 0 else max(1, available_cores() + 1 + n_jobs)


def spatial_context_of(baseline: FeatureBaseline) -> int:
    """The baseline's neighbourhood side (1 for a model saved before ``model.spatial_context`` existed)."""
    return int(getattr(baseline, "spatial_context", 1))


class FeatureBaseline:
    """A fitted-in-one-go classifier of per-pixel features, with its feature settings.

    Subclasses set :attr:`backend`, :attr:`layout` and implement :meth:`_fit` and
    :meth:`_predict_proba`.

    Args:
        features: ``auto`` | ``raw`` | ``interpolated`` (:mod:`~mtan_s1s2.baselines.features`).
        step_days: Grid step of interpolated features, days.
        n_jobs: Threads (``-1``: every core this process may use).
        seed: Random state.
        spatial_context: Neighbourhood side ``k`` in pixels: each pixel's features are
            followed by their mean over the ``k x k`` pixels around it that hold data
            (:func:`~mtan_s1s2.baselines.features.neighbourhood_means`, rasters; the mTAN's
            ``model.net.spatial_context``); 1 = per pixel.

    Raises:
        ValueError: On an unknown ``features`` mode, a non-positive ``step_days`` or a
            ``spatial_context`` that is not 1 or odd >= 3.
    """

    backend: ClassVar[str] = "baseline"
    """Name of the model (``summary.json`` ``backend``, the model file's stem)."""
    layout: ClassVar[Layout] = "flat"
    """Feature layout (:mod:`~mtan_s1s2.baselines.features`)."""
    uses_validation: ClassVar[bool] = False
    """Whether :meth:`fit` uses the validation pixels (early stopping)."""
    predict_rows: ClassVar[int] = 65536
    """Pixels per :meth:`predict_proba` call of the estimator (bounds the memory of a map tile)."""

    def __init__(
        self,
        features: FeatureMode = "auto",
        step_days: float = 10.0,
        n_jobs: int = -1,
        seed: int = 0,
        spatial_context: int = 1,
    ) -> None:
        if features not in ("auto", "raw", "interpolated"):
            raise ValueError(f"model.features must be auto, raw or interpolated, got {features!r}.")
        if float(step_days) <= 0:
            raise ValueError(f"model.step_days must be > 0 days, got {step_days}.")
        self.features: FeatureMode = features
        self.step_days = float(step_days)
        self.n_jobs = int(n_jobs)
        resolve_n_jobs(self.n_jobs)
        self.seed = int(seed)
        self.spatial_context = check_spatial_context(spatial_context)
        self.params: dict[str, Any] = {}
        """The estimator's arguments (recorded in ``summary.json``)."""
        self.model: Any = None
        """The fitted estimator."""
        self.classes: np.ndarray | None = None
        """``(K',) int64`` class indices of the training pixels, the columns of :meth:`_predict_proba`."""
        self.grid: DateGrid | None = None
        """The date grid of the training features, set by the harness before :meth:`fit`."""
        self.contract: dict[str, Any] | None = None
        """What the model expects of its inputs (:func:`~mtan_s1s2.data.datamodule.data_contract`)."""
        self.in_channels: dict[str, int] | None = None
        """Channels per modality of the training data, set by the harness."""
        self.fit_info: dict[str, Any] = {}
        """What fitting found (best iteration of early stopping, ...), recorded in ``summary.json``."""

    @property
    def checkpoint_name(self) -> str:
        """File of the fitted model in a run's ``checkpoints/`` folder (``<backend>.joblib``)."""
        return f"{self.backend}.joblib"

    def fit(
        self,
        features: np.ndarray,
        labels: np.ndarray,
        val_features: np.ndarray | None = None,
        val_labels: np.ndarray | None = None,
    ) -> FeatureBaseline:
        """Fit on ``(N, F)`` features and ``(N,)`` class indices.

        Args:
            features: Training features (NaN = missing in the ``flat`` layout).
            labels: Their class indices.
            val_features: Validation features (used by models with :attr:`uses_validation`).
            val_labels: Their class indices.

        Raises:
            ValueError: If the features and labels disagree in length or there are none.
        """
        if features.ndim != 2 or len(features) != len(labels) or len(labels) == 0:
            raise ValueError(
                f"A baseline fits (N, F) features with N labels, N > 0; got {features.shape} and {labels.shape}."
            )
        self.classes = np.unique(labels).astype(np.int64)
        self._fit(features, labels, val_features, val_labels)
        return self

    def _fit(
        self, features: np.ndarray, labels: np.ndarray, val_features: np.ndarray | None, val_labels: np.ndarray | None
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _fit.")

    def _predict_proba(self, features: np.ndarray) -> np.ndarray:
        """``(N, len(classes))`` probabilities of the estimator, columns in :attr:`classes` order."""
        raise NotImplementedError(f"{type(self).__name__} must implement _predict_proba.")

    def predict_proba(self, features: np.ndarray, num_classes: int) -> np.ndarray:
        """``(N, K) float32`` class probabilities (classes absent from training get 0).

        Predicted :attr:`predict_rows` pixels at a time.

        Raises:
            RuntimeError: If the model is not fitted.
        """
        if self.model is None or self.classes is None:
            raise RuntimeError(f"{type(self).__name__}.fit must be called before predicting.")
        out = np.zeros((features.shape[0], num_classes), np.float32)
        for start in range(0, features.shape[0], self.predict_rows):
            rows = slice(start, start + self.predict_rows)
            out[rows, self.classes] = self._predict_proba(features[rows])
        return out

    def save(self, path: str | Path) -> Path:
        """Write the fitted model, its date grid and data contract with ``joblib``.

        Returns:
            ``path``.

        Raises:
            RuntimeError: If the model is not fitted.
        """
        import joblib

        if self.model is None:
            raise RuntimeError(f"{type(self).__name__}.fit must be called before saving.")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        joblib.dump(self, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> FeatureBaseline:
        """The model :meth:`save` wrote (of this class or, from :class:`FeatureBaseline`, of any baseline).

        Raises:
            ValueError: If the file does not hold a fitted baseline of this class.
        """
        return load_baseline(path, cls)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(features={self.features!r}, {self.params})"


def load_baseline(path: str | Path, cls: type[FeatureBaseline] = FeatureBaseline) -> FeatureBaseline:
    """The fitted baseline of a ``<run>/checkpoints/<backend>.joblib`` file.

    Models saved before classes and contracts were stored (RandomForest runs of earlier
    versions) get them filled: the estimator's ``classes_``, no contract (the data
    config's radiometry and statistics are used).

    Args:
        path: The file.
        cls: The class it must hold.

    Raises:
        ValueError: If the file does not hold a fitted ``cls`` with its date grid.
    """
    import joblib

    path = Path(path)
    obj = joblib.load(path)
    if not isinstance(obj, cls) or getattr(obj, "model", None) is None or getattr(obj, "grid", None) is None:
        raise ValueError(
            f"{path.absolute()} does not hold a fitted {cls.__name__} with its date grid (got {type(obj).__name__}); "
            "give the checkpoints/<model>.joblib of a model=random_forest, lightgbm, minirocket or "
            "multirocket_hydra run."
        )
    for name, default in (("contract", None), ("in_channels", None), ("fit_info", {}), ("seed", 0)):
        if not hasattr(obj, name):
            setattr(obj, name, default)
    if getattr(obj, "classes", None) is None:
        obj.classes = np.asarray(obj.model.classes_, np.int64)
    return obj


__all__ = [
    "BASELINES_EXTRA",
    "FeatureBaseline",
    "available_cores",
    "load_baseline",
    "require",
    "resolve_n_jobs",
]
