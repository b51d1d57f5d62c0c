"""Which epochs to test: rules for choosing (and averaging) checkpoints, judged on validation pixels.

A training run tests the checkpoint of its best ``val/OA`` epoch. On a validation split of a
few hundred pixels that maximum over ~100 noisy epochs is optimistic, and the epoch it picks
is partly luck. This script compares rules on the same runs:

1. Train a sweep with :class:`EpochProbabilities` as an extra callback: after every
   validation it writes the softmax probabilities of every labelled validation and test pixel
   (``<run>/epoch_probs/epoch_XXX.npz``, float16). It restores the global random state, so the
   run trains as it would without it (same batches, same test metrics)::

       PYTHONPATH=scripts python train.py -m experiment=real data=worldcereal_table trainer=cpu \\
         seed=1,2,3 data.split.fold=1,2,3,4,5 +callbacks.epoch_probs._target_=checkpoint_rules.EpochProbabilities \\
         '+callbacks.epoch_probs.output_dir=${paths.output_dir}'

2. Score the rules: ``python scripts/checkpoint_rules.py logs/real/multiruns/<sweep> [...]``.

A rule chooses epochs from validation pixels and averages their probabilities (one epoch:
its own). ``best_oa`` (what ``train.py`` tests with ``model.checkpoint_ensemble=1``),
``best_loss``, ``last``, ``lastK`` (the last K epochs), ``best+last``, ``topK_oa`` (the K
best epochs by validation OA, what ``model.checkpoint_ensemble=K`` tests). Columns:

* ``split-half``: the validation pixels are split in two halves by 8 x 8 pixel blocks of
  each sample (whole pixels of a table); the rule chooses on one half and is scored on the
  other, both ways, averaged over 20 random splits. A rule's choice is never scored on the
  pixels it was made on, so rules that choose and rules that do not compare fairly (with
  half the pixels to choose on, choosing rules are somewhat handicapped).
* ``val``: the rule chosen on all validation pixels and scored on them (optimistic for
  rules that choose).
* ``test``: the rule chosen on all validation pixels, scored on the test pixels; read after
  the decision.

Deltas are against ``best_oa``, paired by run: mean ± standard error (runs higher / lower).

3. Score a mixed ensemble of two sweeps (say the mTAN recipe and TempCNN, the mean of what
   ``eval.py ckpt_path=[a,b]`` averages): ``--mix SWEEP_A SWEEP_B [--rule top10_oa]`` pairs
   their runs by ``seed`` and ``data.split.fold`` (each run's ``config.yaml``), lets each run
   choose its own epochs by the rule on the same validation pixels, averages the two
   choices' probabilities with equal weight, and scores A, B and A+B on the three columns.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf

from mtan_s1s2.ensemble.probabilities import probabilities_from_logits

EPOCH_DIR = "epoch_probs"
RULES = (
    "best_oa", "best_loss", "last", "last5", "last10", "last20", "best+last",
    "top3_oa", "top5_oa", "top10_oa", "top20_oa",
)  # fmt: skip


class EpochProbabilities(Callback):
    """After every validation, the probabilities of every labelled validation and test pixel.

    Args:
        output_dir: The run directory; files go to ``<output_dir>/epoch_probs/epoch_XXX.npz``
            with arrays ``{val,test}_{patch_id,row,col,label,proba}`` (``proba`` float16,
            ``(N, K)`` over all classes, the ``ignore_index`` one 0).
    """

    def __init__(self, output_dir: str) -> None:
        super().__init__()
        self.folder = Path(output_dir) / EPOCH_DIR
        self._test_ready = False

    @staticmethod
    def _pixels(module: L.LightningModule, loader: Any) -> dict[str, np.ndarray]:
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("patch_id", "row", "col", "label", "proba")}
        ignore_index = int(getattr(module, "ignore_index", 0))
        for batch in loader:
            batch = {k: v.to(module.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            proba = probabilities_from_logits(module(batch).float(), ignore_index)
            label = batch["label"]
            b, r, c = torch.nonzero(label != ignore_index, as_tuple=True)
            parts["patch_id"].append(batch["patch_id"][b].cpu().numpy())
            parts["row"].append(r.cpu().numpy())
            parts["col"].append(c.cpu().numpy())
            parts["label"].append(label[b, r, c].cpu().numpy())
            parts["proba"].append(proba[b, :, r, c].cpu().numpy().astype(np.float16))
        return {k: np.concatenate(v) for k, v in parts.items()}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Write this epoch's file (not during the sanity check)."""
        if trainer.sanity_checking:
            return
        rng = torch.get_rng_state()
        datamodule = trainer.datamodule  # type: ignore[attr-defined]
        training = pl_module.training
        pl_module.eval()
        with torch.no_grad():
            val = self._pixels(pl_module, datamodule.val_dataloader())
            if not self._test_ready:
                datamodule.setup("test")
                self._test_ready = True
            test = self._pixels(pl_module, datamodule.test_dataloader())
        pl_module.train(training)
        torch.set_rng_state(rng)
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays = {f"val_{k}": v for k, v in val.items()} | {f"test_{k}": v for k, v in test.items()}
        np.savez(self.folder / f"epoch_{trainer.current_epoch:03d}.npz", **arrays)  # type: ignore[arg-type]


def pixel_order(z: Any, split: str) -> np.ndarray:
    """The order that sorts one epoch file's ``split`` pixels by sample, row and column (:func:`load_split`'s order)."""
    return np.lexsort((z[f"{split}_col"], z[f"{split}_row"], z[f"{split}_patch_id"]))


def load_split(files: Sequence[Path], split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(P (E, N, K) float32, labels (N,), 8 x 8 block id (N,))`` of one split over the epochs, pixels in one order."""
    probas, labels, blocks = [], None, None
    for f in files:
        z = np.load(f)
        order = pixel_order(z, split)
        label = z[f"{split}_label"][order]
        if labels is None:
            labels = label
            keys = np.stack([z[f"{split}_patch_id"], z[f"{split}_row"] // 8, z[f"{split}_col"] // 8], 1)[order]
            blocks = np.unique(keys, axis=0, return_inverse=True)[1].ravel()
        elif not np.array_equal(label, labels):
            raise ValueError(f"{f}: the {split} pixels differ from the first epoch's")
        probas.append(z[f"{split}_proba"][order].astype(np.float32))
    assert labels is not None and blocks is not None
    return np.stack(probas), labels, blocks


def epoch_oa(P: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """OA of every epoch on the pixels ``idx``."""
    return np.asarray((P[:, idx].argmax(-1) == y[idx]).mean(-1))


def kept_top_k(scores: Sequence[float], k: int) -> list[int]:
    """The epochs Lightning's ``ModelCheckpoint(mode="max", save_top_k=k)`` keeps at the end of a run.

    The epochs' scores come in order. An epoch enters while fewer than ``k`` are kept, and
    afterwards only with a score strictly above the lowest kept one, which it evicts; among
    kept epochs tied at the lowest score the earliest is evicted first (Lightning takes the
    first of its kept checkpoints, in the order they were saved, with the lowest score). So
    among tied epochs the set kept depends on their order, not only on their scores: this
    replays it, as ``model.checkpoint_ensemble=k`` keeps its checkpoints.

    Args:
        scores: The monitored score of every epoch, in order (``val/OA``).
        k: ``save_top_k`` (>= 1).

    Returns:
        The kept epochs, ascending.
    """
    kept: dict[int, float] = {}
    lowest = -1
    for epoch, score in enumerate(scores):
        if len(kept) == k:
            if not score > kept[lowest]:
                continue
            del kept[lowest]
        kept[epoch] = float(score)
        if len(kept) == k:
            lowest = min(kept, key=kept.__getitem__)  # the first saved among the lowest
    return sorted(kept)


def chosen_epochs(rule: str, P: np.ndarray, y: np.ndarray, idx: np.ndarray) -> list[int]:
    """The epochs ``rule`` averages, chosen on the validation pixels ``idx``.

    ``best_oa``: the earliest of the epochs with the highest OA (what Lightning keeps);
    ``topK_oa``: the K epochs Lightning's top-k checkpointing keeps (:func:`kept_top_k`).
    """
    n = P.shape[0]
    if rule == "best_oa":
        return [int(np.argmax(epoch_oa(P, y, idx)))]
    if rule == "best_loss":
        p = np.take_along_axis(P[:, idx], y[idx][None, :, None], -1)[..., 0]
        return [int(np.argmin(-np.log(np.clip(p, 1e-7, 1.0)).mean(-1)))]
    if rule == "last":
        return [n - 1]
    if rule == "best+last":
        return sorted({int(np.argmax(epoch_oa(P, y, idx))), n - 1})
    if rule.startswith("last"):
        return list(range(max(0, n - int(rule[4:])), n))
    if rule.startswith("top") and rule.endswith("_oa"):
        return kept_top_k(epoch_oa(P, y, idx).tolist(), int(rule[3:-3]))
    raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")


def mean_oa(P: np.ndarray, y: np.ndarray, epochs: list[int], idx: np.ndarray) -> float:
    """OA on ``idx`` of the mean of the epochs' probabilities."""
    return float((P[epochs][:, idx].mean(0).argmax(-1) == y[idx]).mean())


def runs_of(sweep: Path) -> list[Path]:
    """The run folders under ``sweep`` (or ``sweep`` itself) that hold ``epoch_probs``, sorted."""
    return sorted({f.parent.parent for f in sweep.rglob(f"{EPOCH_DIR}/epoch_000.npz")})


def epoch_files(run: Path) -> list[Path]:
    """One run's ``epoch_probs/epoch_*.npz``, in epoch order.

    Raises:
        ValueError: If the run has no ``epoch_probs``.
    """
    files = sorted((run / EPOCH_DIR).glob("epoch_*.npz"))
    if not files:
        raise ValueError(f"{run} has no {EPOCH_DIR}/epoch_*.npz: train it with the EpochProbabilities callback")
    return files


def load_run(run: Path) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`load_split` of one run's validation and test pixels.

    Raises:
        ValueError: If the run has no ``epoch_probs``.
    """
    files = epoch_files(run)
    return load_split(files, "val"), load_split(files, "test")


def block_halves(blocks: np.ndarray, n_splits: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_splits`` random splits of the pixels in two halves by their block ids: ``(half a, half b)`` indices."""
    n_blocks = int(blocks.max()) + 1
    rng = np.random.default_rng(seed)
    halves = []
    for _ in range(n_splits):
        in_a = (rng.permutation(n_blocks) < n_blocks // 2)[blocks]
        halves.append((np.flatnonzero(in_a), np.flatnonzero(~in_a)))
    return halves


def score_run(run: Path, n_splits: int = 20, seed: int = 0) -> dict[str, dict[str, float]]:
    """``{rule: {"split_half", "val", "test"}}`` of one run's ``epoch_probs``."""
    (Pv, yv, blocks), (Pt, yt, _) = load_run(run)
    all_val, all_test = np.arange(len(yv)), np.arange(len(yt))
    halves = block_halves(blocks, n_splits, seed)
    out = {}
    for rule in RULES:
        half = [
            (mean_oa(Pv, yv, chosen_epochs(rule, Pv, yv, a), b) + mean_oa(Pv, yv, chosen_epochs(rule, Pv, yv, b), a))
            / 2
            for a, b in halves
        ]
        epochs = chosen_epochs(rule, Pv, yv, all_val)
        out[rule] = {
            "split_half": float(np.mean(half)),
            "val": mean_oa(Pv, yv, epochs, all_val),
            "test": mean_oa(Pt, yt, epochs, all_test),
        }
    return out


def run_key(run: Path) -> tuple[int, int]:
    """``(seed, data.split.fold)`` of a run, from its ``config.yaml`` (the composed config ``train.py`` writes)."""
    cfg = OmegaConf.load(run / "config.yaml")
    return int(cfg.seed), int(cfg.data.split.fold)


def score_mix(
    run_a: Path, run_b: Path, rule: str = "top10_oa", n_splits: int = 20, seed: int = 0
) -> dict[str, dict[str, float]]:
    """``{"a", "b", "a+b": {"split_half", "val", "test"}}``: two runs on the same pixels and their mean.

    Each run chooses its epochs by ``rule`` on the same validation pixels (a half of them for
    ``split_half``, scored on the other half, both ways, over ``n_splits`` random splits of
    the 8 x 8 pixel blocks); ``a+b`` is the equal-weight mean of the two choices' mean
    probabilities.

    Raises:
        ValueError: If the two runs' validation or test pixels (labels, in one order) differ.
    """
    (Pa, yv, blocks), (Ta, yt, _) = load_run(run_a)
    (Pb, yv_b, _), (Tb, yt_b, _) = load_run(run_b)
    if not (np.array_equal(yv, yv_b) and np.array_equal(yt, yt_b)):
        raise ValueError(f"{run_a} and {run_b} do not share their validation and test pixels: pair runs of one split")

    def members(P: np.ndarray, Q: np.ndarray, chose_on: np.ndarray) -> tuple[np.ndarray, ...]:
        """A's and B's mean probabilities (pixels of ``P``, ``Q``), epochs chosen on ``chose_on``; their mean."""
        pa = P[chosen_epochs(rule, Pa, yv, chose_on)].mean(0)
        pb = Q[chosen_epochs(rule, Pb, yv, chose_on)].mean(0)
        return pa, pb, (pa + pb) / 2

    def oa(probs: Sequence[np.ndarray], y: np.ndarray) -> np.ndarray:
        return np.array([float((p.argmax(-1) == y).mean()) for p in probs])

    all_val = np.arange(len(yv))
    half = [
        (oa([p[b] for p in members(Pa, Pb, a)], yv[b]) + oa([p[a] for p in members(Pa, Pb, b)], yv[a])) / 2
        for a, b in block_halves(blocks, n_splits, seed)
    ]
    columns = {
        "split_half": np.mean(half, 0),
        "val": oa(members(Pa, Pb, all_val), yv),
        "test": oa(members(Ta, Tb, all_val), yt),
    }
    return {m: {k: float(v[i]) for k, v in columns.items()} for i, m in enumerate(("a", "b", "a+b"))}


def mix_table(sweep_a: Path, sweep_b: Path, rule: str = "top10_oa") -> tuple[str, dict[str, Any]]:
    """The Markdown table of A, B and their mixed ensemble over the runs two sweeps share by seed and fold.

    Raises:
        ValueError: If no run of ``sweep_a`` has a partner of the same seed and fold in ``sweep_b``.
    """
    found = [{run_key(run): run for run in runs_of(sweep)} for sweep in (sweep_a, sweep_b)]
    keys = sorted(set(found[0]) & set(found[1]))
    if not keys:
        raise ValueError(f"no run of {sweep_a} has the seed and data.split.fold of a run of {sweep_b}")
    scores = {key: score_mix(found[0][key], found[1][key], rule) for key in keys}
    lines = [
        f"{sweep_a} (A) and {sweep_b} (B): {len(keys)} runs paired by seed and fold, rule {rule}",
        "",
        "| model | split-half val OA | val OA (chosen on it) | test OA | Δ split-half vs B | Δ test vs B |",
        "|---|---|---|---|---|---|",
    ]
    for m in ("a", "b", "a+b"):
        col = {k: np.array([scores[q][m][k] for q in keys]) for k in ("split_half", "val", "test")}
        base = {k: np.array([scores[q]["b"][k] for q in keys]) for k in ("split_half", "test")}
        lines.append(
            f"| {m.upper()} | {col['split_half'].mean():.4f} | {col['val'].mean():.4f} | {col['test'].mean():.4f} "
            f"| {_delta(col['split_half'], base['split_half'])} | {_delta(col['test'], base['test'])} |"
        )
    return "\n".join(lines), {f"seed={s},fold={f}": v for (s, f), v in scores.items()}


def _delta(values: np.ndarray, base: np.ndarray) -> str:
    d = 100 * (values - base)
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{d.mean():+.2f} ± {se:.2f} ({int((d > 0).sum())}/{int((d < 0).sum())})"


def table(scores: list[dict[str, dict[str, float]]]) -> str:
    """The Markdown table of the rules over the runs of one sweep."""
    lines = [
        "| rule | split-half val OA | Δ split-half | val OA (chosen on it) | test OA | Δ test |",
        "|---|---|---|---|---|---|",
    ]
    for rule in RULES:
        col = {k: np.array([s[rule][k] for s in scores]) for k in ("split_half", "val", "test")}
        base = {k: np.array([s["best_oa"][k] for s in scores]) for k in ("split_half", "test")}
        lines.append(
            f"| {rule} | {col['split_half'].mean():.4f} | {_delta(col['split_half'], base['split_half'])} "
            f"| {col['val'].mean():.4f} | {col['test'].mean():.4f} | {_delta(col['test'], base['test'])} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep (or run) folders of runs with epoch_probs/")
    parser.add_argument("--json", type=Path, help="also write every run's scores here")
    parser.add_argument("--mix", action="store_true", help="score the mixed ensemble of the two sweeps given")
    parser.add_argument("--rule", default="top10_oa", choices=RULES, help="the rule of --mix (default top10_oa)")
    args = parser.parse_args(argv)
    if args.mix:
        if len(args.sweeps) != 2:
            parser.error(f"--mix takes two sweeps (A and B), got {len(args.sweeps)}")
        text, mixed = mix_table(args.sweeps[0], args.sweeps[1], args.rule)
        print(text)
        if args.json:
            args.json.write_text(json.dumps(mixed, indent=1))
        return
    everything = {}
    for sweep in args.sweeps:
        runs = runs_of(sweep)
        scores = [score_run(run) for run in runs]
        everything[str(sweep)] = {str(run): s for run, s in zip(runs, scores, strict=True)}
        print(f"\n{sweep}: {len(runs)} runs\n\n{table(scores)}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
