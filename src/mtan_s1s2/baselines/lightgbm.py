"""LightGBM gradient-boosted trees on per-pixel time-series features, early-stopped on the validation split.

``python train.py model=lightgbm [data=...]`` fits it on the same training pixels, split,
normalisation and features as ``model=random_forest`` (:mod:`~mtan_s1s2.baselines.features`,
``flat`` layout: the observations at the date grid, NaN where invalid, which LightGBM
routes down the side of each split that lowers the loss most) and writes the same metrics
and files (:mod:`~mtan_s1s2.baselines.harness`).

Early stopping: boosting stops when the multi-class log-loss of the **validation** pixels
has not improved for ``early_stopping_rounds`` rounds, and the model keeps the best round
(``summary.json``: ``baseline.fit.best_iteration``). Validation pixels of a class absent
from the training pixels are left out of that loss (the model cannot predict it). Without
validation pixels (or with ``early_stopping_rounds: null``) all ``n_estimators`` rounds are
fitted. The test split is never seen before the test.

Needs ``lightgbm`` (``pip install 'mtan-s1s2[baselines]'``). After Ke et al., "LightGBM: A
Highly Efficient Gradient Boosting Decision Tree", NeurIPS 2017.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, ClassVar

import numpy as np

from mtan_s1s2.baselines.base import FeatureBaseline, require, resolve_n_jobs
from mtan_s1s2.baselines.features import FeatureMode

log = logging.getLogger(__name__)


class LightGBMBaseline(FeatureBaseline):
    """A ``lightgbm.LGBMClassifier`` (multi-class log-loss; binary with 2 classes) with its feature settings.

    Args:
        n_estimators: Most boosting rounds.
        learning_rate: Shrinkage of each round.
        num_leaves: Leaves per tree.
        min_child_samples: Minimum training pixels per leaf.
        subsample: Share of the training pixels drawn for each round (``subsample_freq=1``).
        colsample_bytree: Share of the features drawn for each tree.
        reg_lambda: L2 regularisation of the leaf values.
        class_weight: ``None`` or ``"balanced"``.
        early_stopping_rounds: Rounds without a better validation log-loss before stopping;
            ``None`` fits every round.
        features: ``auto`` | ``raw`` | ``interpolated`` (:mod:`~mtan_s1s2.baselines.features`).
        step_days: Grid step of interpolated features, days.
        n_jobs: Threads (-1: every core this process may use).
        seed: ``random_state`` of LightGBM (bagging, feature draws); fits are deterministic.

    Raises:
        ImportError: If LightGBM is not installed (naming the pip command).
        ValueError: On a non-positive count or share.
    """

    backend: ClassVar[str] = "lightgbm"
    uses_validation: ClassVar[bool] = True

    def __init__(
        self,
        n_estimators: int = 2000,
        learning_rate: float = 0.05,
        num_leaves: int = 31,
        min_child_samples: int = 10,
        subsample: float = 0.8,
        colsample_bytree: float = 0.5,
        reg_lambda: float = 1.0,
        class_weight: str | None = None,
        early_stopping_rounds: int | None = 100,
        features: FeatureMode = "auto",
        step_days: float = 10.0,
        n_jobs: int = -1,
        seed: int = 0,
        spatial_context: int = 1,
    ) -> None:
        require("lightgbm", "model=lightgbm", "lightgbm")
        for key, value in (("n_estimators", n_estimators), ("num_leaves", num_leaves)):
            if int(value) < 1:
                raise ValueError(f"model.{key} must be >= 1, got {value}.")
        for key, share in (("subsample", subsample), ("colsample_bytree", colsample_bytree)):
            if not 0 < float(share) <= 1:
                raise ValueError(f"model.{key} must be in (0, 1], got {share}.")
        if early_stopping_rounds is not None and int(early_stopping_rounds) < 1:
            raise ValueError(f"model.early_stopping_rounds must be >= 1 or null, got {early_stopping_rounds}.")
        super().__init__(features, step_days, n_jobs, seed, spatial_context)
        self.early_stopping_rounds = None if early_stopping_rounds is None else int(early_stopping_rounds)
        self.params = {
            "objective": "multiclass",
            "n_estimators": int(n_estimators),
            "learning_rate": float(learning_rate),
            "num_leaves": int(num_leaves),
            "min_child_samples": int(min_child_samples),
            "subsample": float(subsample),
            "subsample_freq": 1,
            "colsample_bytree": float(colsample_bytree),
            "reg_lambda": float(reg_lambda),
            "class_weight": class_weight,
            "random_state": int(seed),
            "n_jobs": int(n_jobs),
            "deterministic": True,
            "force_col_wise": True,
            "verbose": -1,
        }

    def _fit(
        self, features: np.ndarray, labels: np.ndarray, val_features: np.ndarray | None, val_labels: np.ndarray | None
    ) -> None:
        lgb = require("lightgbm", "model=lightgbm", "lightgbm")
        assert self.classes is not None  # set by fit()
        params = {**self.params, "n_jobs": resolve_n_jobs(self.n_jobs)}
        n_classes = len(np.unique(labels))
        if n_classes < 2:
            raise ValueError(f"LightGBM needs training pixels of 2 classes or more; got only class {labels[0]}.")
        params["objective"] = "multiclass" if n_classes > 2 else "binary"
        fit_kwargs: dict[str, Any] = {}
        n_val = 0
        if self.early_stopping_rounds is not None and val_features is not None and val_labels is not None:
            seen = np.isin(val_labels, labels)
            n_val = int(seen.sum())
            if n_val < len(val_labels):
                log.info(
                    "LightGBM early stopping: %d validation pixels of classes absent from training left out of the "
                    "validation loss.",
                    len(val_labels) - n_val,
                )
            if n_val:
                # Labels as 0..K'-1 in the order of self.classes (the wrapper's own encoding is not
                # applied to eval_y in every LightGBM version).
                evaluated = (val_features[seen], np.searchsorted(self.classes, val_labels[seen]))
                new_api = "eval_X" in inspect.signature(lgb.LGBMClassifier.fit).parameters  # LightGBM >= 4.6
                fit_kwargs = {
                    **({"eval_X": evaluated[0], "eval_y": evaluated[1]} if new_api else {"eval_set": [evaluated]}),
                    "eval_metric": "multi_logloss" if n_classes > 2 else "binary_logloss",
                    "callbacks": [lgb.early_stopping(self.early_stopping_rounds, verbose=False)],
                }
        if not n_val:
            log.info(
                "LightGBM: no validation pixels for early stopping; fitting all %d rounds.", params["n_estimators"]
            )
        self.model = lgb.LGBMClassifier(**params).fit(features, np.searchsorted(self.classes, labels), **fit_kwargs)
        best = getattr(self.model, "best_iteration_", None)
        self.fit_info = {
            "best_iteration": int(best) if best else int(params["n_estimators"]),
            "early_stopping_val_pixels": n_val,
        }
        log.info("LightGBM: %d boosting rounds kept (%s)", self.fit_info["best_iteration"],
                 "best validation log-loss" if n_val else "no early stopping")  # fmt: skip

    def _predict_proba(self, features: np.ndarray) -> np.ndarray:
        proba: np.ndarray = self.model.predict_proba(features)
        return proba


__all__ = ["LightGBMBaseline"]
