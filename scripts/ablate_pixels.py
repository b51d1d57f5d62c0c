"""Validation-fold ablation of the mTAN's blocks on a pixel table, against TempCNN and a RandomForest.

    python scripts/ablate_pixels.py data=sits_mt9 --folds 1 2 3 --seeds 1 2 --epochs 60 --out ablation.csv

Each fold's training and validation pixels are read once through the data preset (the same
split, labels and normalisation as ``train.py``; the test split is never read) and held in
memory; every variant then trains with the harness's optimiser (AdamW, lr 1e-3, weight
decay 1e-2, cosine schedule, batch 32, masked cross-entropy) and augmentations
(:class:`~mtan_s1s2.data.augment.SITSAugment`) for ``--epochs`` epochs, and the row holds
its best validation OA and macro-F1 over the epochs (the checkpoint ``train.py`` would
test) and those of the last epoch (no epoch chosen on the validation pixels, so not
inflated by picking the luckiest of many noisy epochs). ``half_selected_OA`` /
``half_last_OA``: over 50 random halves of the validation pixels, the OA on one half of the
epoch chosen on the other half, and of the last epoch (does choosing the best epoch on this
many pixels beat taking the last one?). With several ``--seeds``, a row per
fold and network variant with seed ``ensemble`` scores the mean of the seeds' last-epoch
validation probabilities. A variant with ``ema`` (a decay)
validates an exponential moving average of the weights, updated after every optimiser step
(``torch.optim.swa_utils.AveragedModel``, buffers averaged too). ``--max-train N`` keeps a
random ``N`` of the training pixels (for speed on large tables). The RandomForest (500
trees) sees the raw normalised series with invalid observations filled by linear
interpolation along the dates. A variant is a set of ``model.net`` overrides
(``VARIANTS``); the base is ``configs/model/mtan.yaml``'s network.
"""

from __future__ import annotations

import argparse
import csv
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from sklearn.ensemble import RandomForestClassifier
from sklearn.metrics import f1_score
from torch import Tensor
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.data.augment import SITSAugment
from mtan_s1s2.data.batch import collate_sits
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.models.reference_times import MAX_AUTO_REF_TIMES, auto_num_ref_times, auto_ref_range
from mtan_s1s2.models.tempcnn import TempCNN

SMALL = {"attention_init": "identity", "head_norm": True}
AUG = {"temporal_dropout": 0.2, "noise_std": 0.05, "date_shift_days": 10}
LIN = {"input_hidden": 0, "fusion_hidden": 0}  # linear per-date blocks
TC_HEAD = {"head": "conv", "conv_kernel": 5, "conv_layers": 3, "head_hidden": [256], "dropout": 0.2}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "small_real": {**SMALL, "augment": AUG},
    "small_real_noaug": SMALL,
    "kernel": {**SMALL, "attention": "kernel", "augment": AUG},
    "learned_kernel": {**SMALL, "attention": "learned_kernel", "augment": AUG},
    "conv_head": {**SMALL, "head": "conv", "augment": AUG},
    "kernel_conv": {**SMALL, "attention": "kernel", "head": "conv", "augment": AUG},
    "learned_kernel_conv": {**SMALL, "attention": "learned_kernel", "head": "conv", "augment": AUG},
    "lk_conv_q32": {**SMALL, "attention": "learned_kernel", "head": "conv", "num_ref_times": 32, "augment": AUG},
    "lk_conv_d64": {**SMALL, "attention": "learned_kernel", "head": "conv", "d_model": 64, "augment": AUG},
    "lk_conv_drop3": {**SMALL, "attention": "learned_kernel", "head": "conv", "dropout": 0.3, "augment": AUG},
    "lk_conv_nonorm": {"attention_init": "identity", "attention": "learned_kernel", "head": "conv", "augment": AUG},
    "conv_head_drop3": {**SMALL, "head": "conv", "dropout": 0.3, "augment": AUG},
    "conv_head_d16": {**SMALL, "head": "conv", "d_model": 16, "augment": AUG},
    "conv_head_ema": {**SMALL, "head": "conv", "augment": AUG, "ema": 0.99},
    "conv_head_ema995": {**SMALL, "head": "conv", "augment": AUG, "ema": 0.995},
    "conv_head_q32": {**SMALL, "head": "conv", "num_ref_times": 32, "augment": AUG},
    "conv_head_noaug": {**SMALL, "head": "conv"},
    # the conv head shaped as TempCNN's (kernel 5, 3 layers, one hidden layer of 256, dropout 0.2)
    "conv_head_tc": {**SMALL, **TC_HEAD, "augment": AUG},
    "kernel_conv_tc": {**SMALL, **TC_HEAD, "attention": "kernel", "augment": AUG},
    # linear per-date blocks (input_hidden / fusion_hidden 0): the encoder of "kernel_lin_tc" is a
    # linear interpolation of the bands onto the reference times, so it is TempCNN on that series
    "kernel_lin_tc": {**SMALL, **TC_HEAD, **LIN, "attention": "kernel", "augment": AUG},
    "kernel_linin_tc": {**SMALL, **TC_HEAD, "attention": "kernel", "input_hidden": 0, "augment": AUG},
    "kernel_linfuse_tc": {**SMALL, **TC_HEAD, "attention": "kernel", "fusion_hidden": 0, "augment": AUG},
    "kernel_lin_tc_nonorm": {"attention_init": "identity", **TC_HEAD, **LIN, "attention": "kernel", "augment": AUG},
    "conv_head_lin": {**SMALL, **LIN, "head": "conv", "augment": AUG},
    **{
        f"conv_head_lin_q{q}": {**SMALL, **LIN, "head": "conv", "num_ref_times": q, "augment": AUG}
        for q in (12, 24, 32)
    },
    "conv_head_lin_nonorm": {"attention_init": "identity", **LIN, "head": "conv", "augment": AUG},
    # TempCNN through the mTAN: linear blocks, a narrow kernel onto one reference time per date
    "kernel_lin_tc_q24_w05": {
        "attention_init": "identity",
        **TC_HEAD,
        **LIN,
        "attention": "kernel",
        "num_ref_times": 24,
        "kernel_width": 0.5,
        "augment": AUG,
    },
    "conv_head_lin_qdates": {**SMALL, **LIN, "head": "conv", "q_dates": True, "augment": AUG},
    "conv_head_lin_nonorm_qdates": {
        "attention_init": "identity",
        **LIN,
        "head": "conv",
        "q_dates": True,
        "augment": AUG,
    },
    "kernel_lin_tc_qdates_w05": {
        "attention_init": "identity",
        **TC_HEAD,
        **LIN,
        "attention": "kernel",
        "q_dates": True,
        "kernel_width": 0.5,
        "augment": AUG,
    },
    "kernel_lin_qdates_w05": {
        "attention_init": "identity",
        **LIN,
        "head": "conv",
        "attention": "kernel",
        "q_dates": True,
        "kernel_width": 0.5,
        "augment": AUG,
    },
    # learned scores plus the kernel's log-weight (linear blocks, recipe head): at 16 reference
    # times, and onto one reference time per date with the kernel at one and at half a step
    "lk_lin": {**SMALL, **LIN, "head": "conv", "attention": "learned_kernel", "augment": AUG},
    "lk_lin_qdates": {**SMALL, **LIN, "head": "conv", "attention": "learned_kernel", "q_dates": True, "augment": AUG},
    "lk_lin_qdates_w05": {
        **SMALL,
        **LIN,
        "head": "conv",
        "attention": "learned_kernel",
        "q_dates": True,
        "kernel_width": 0.5,
        "augment": AUG,
    },
    "tempcnn": {"tempcnn": True, "augment": AUG},
    "tempcnn_ema": {"tempcnn": True, "augment": AUG, "ema": 0.99},
    "tempcnn_noaug": {"tempcnn": True},
    "rf": {"rf": True},
}
# the first and last reference times on the first and last dates (ref_range=auto: the dates' span,
# the reference times at the centres of its Q steps, half a step inside the first and last dates)
VARIANTS.update(
    {
        f"{name}_aligned": {**VARIANTS[name], "aligned": True}
        for name in ("conv_head_lin", "conv_head_lin_qdates", "lk_lin_qdates_w05", "kernel_lin_qdates_w05")
    }
)
# training levers on the recipe's network (conv_head_lin) and on TempCNN
for _name, _extra in {
    "swa25": {"swa": 0.25},
    "swa50": {"swa": 0.5},
    "ls01": {"label_smoothing": 0.1},
    "tta8": {"tta": 8},
    "lr3e-3": {"lr": 3e-3},
    "lr3e-4": {"lr": 3e-4},
    "wd5e-2": {"weight_decay": 5e-2},
    "bs16": {"batch": 16},
    "bs64": {"batch": 64},
}.items():
    VARIANTS[f"conv_head_lin_{_name}"] = {**VARIANTS["conv_head_lin"], **_extra}
    VARIANTS[f"tempcnn_{_name}"] = {**VARIANTS["tempcnn"], **_extra}
# the recipe's network (model=mtan_real: num_ref_times=auto) and manifold mixup of its encoder features
VARIANTS["recipe"] = {**VARIANTS["conv_head_lin"], "q_auto": True}
for _alpha in ("0.2", "0.5"):
    VARIANTS[f"recipe_mix{_alpha.replace('.', '')}"] = {**VARIANTS["recipe"], "mixup": float(_alpha)}
# mTAND-Enc's classifier: a bidirectional GRU over the reference times instead of the conv head
VARIANTS["recipe_gru"] = {**VARIANTS["recipe"], "head": "gru"}
VARIANTS["recipe_gru32"] = {**VARIANTS["recipe"], "head": "gru", "gru_hidden": 32}
# the head also reads each modality's observations linearly interpolated at the reference times
VARIANTS["recipe_rv"] = {**VARIANTS["recipe"], "ref_values": True}
# dropout after each convolution and hidden layer of the head (the recipe: 0.1)
for _p in ("0.2", "0.3", "0.5"):
    VARIANTS[f"recipe_drop{_p[-1]}"] = {**VARIANTS["recipe"], "dropout": float(_p)}
# the capacity of the recipe's network: one hidden head layer, narrower convolutions, wider features, dropout
for _name, _extra in {
    "h1": {"head_hidden": [256]},
    "f32": {"conv_filters": 32},
    "d64": {"d_model": 64},
    "drop2": {"dropout": 0.2},
}.items():
    VARIANTS[f"conv_head_lin_{_name}"] = {**VARIANTS["conv_head_lin"], **_extra}


def load_fold(overrides: list[str]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The datamodule and its whole train / val splits as two collated batches."""
    GlobalHydra.instance().clear()
    with hydra.initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = hydra.compose("train", overrides=overrides)
    dm = hydra.utils.instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    splits = {s: collate_sits([dm.dataset(s)[i] for i in range(len(dm.dataset(s)))]) for s in ("train", "val")}
    return dm, splits["train"], splits["val"]


def take(batch: Mapping[str, Any], idx: Tensor) -> dict[str, Any]:
    """Rows ``idx`` of a collated batch."""
    out: dict[str, Any] = {}
    for k, v in batch.items():
        if isinstance(v, Mapping):
            out[k] = {kk: vv[idx] for kk, vv in v.items()}
        elif isinstance(v, Tensor):
            out[k] = v[idx]
    return out


def rf_features(batch: Mapping[str, Any], modalities: list[str]) -> np.ndarray:
    """Per pixel, every modality's series with invalid observations linearly interpolated."""
    feats = []
    for m in modalities:
        x = batch[m]["x"][:, :, :, 0, 0].numpy()  # (N, T, C)
        valid = batch[m]["mask"][:, :, 0, 0].numpy()
        doy = batch[m]["doy"].numpy()
        out = np.zeros_like(x)
        for n in range(x.shape[0]):
            v = valid[n]
            for c in range(x.shape[2]):
                out[n, :, c] = np.interp(doy[n], doy[n][v], x[n, v, c]) if v.any() else 0.0
        feats.append(out.reshape(len(out), -1))
    return np.concatenate(feats, axis=1)


def metrics(pred: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """OA and macro-F1 over the labelled pixels."""
    return float((pred == y).mean()), float(f1_score(y, pred, average="macro"))


TRAINING_KEYS = ("augment", "ema", "q_dates", "q_auto", "aligned", "lr", "weight_decay", "batch", "label_smoothing",
                 "swa", "tta", "mixup")  # fmt: skip
"""Variant keys of the training loop (the others are ``model.net`` keys)."""


def predict_proba(net: torch.nn.Module, val: dict[str, Any], tta: int, augment: SITSAugment | None) -> np.ndarray:
    """Class probabilities ``(N, K - 1)`` of the validation pixels; with ``tta`` > 0, the mean over the
    clean pass and ``tta`` passes of the training augmentations."""
    n = len(val["label"])
    passes = []
    with torch.no_grad():
        for k in range(1 + (tta if augment is not None else 0)):
            out = []
            for i in range(0, n, 512):
                batch = take(val, torch.arange(i, min(i + 512, n)))
                if k > 0:
                    batch = augment(batch)  # type: ignore[misc]
                out.append(net(batch)[:, 1:, 0, 0].softmax(1))
            passes.append(torch.cat(out))
    return torch.stack(passes).mean(0).numpy()


def build_net(variant: dict[str, Any], dm: Any) -> torch.nn.Module:
    """The variant's network: TempCNN, or the mTAN of ``configs/model/mtan.yaml`` with its ``model.net`` keys."""
    num_classes = dm.num_classes
    if variant.get("tempcnn"):
        return TempCNN(dict(dm.in_channels), num_classes, seq_len=dict(dm.seq_len))
    base = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "model" / "mtan.yaml").net)
    assert isinstance(base, dict)
    for k in ("_target_", "in_channels", "num_classes", "mlp", "ref_range"):
        base.pop(k)
    base.update({k: v for k, v in variant.items() if k not in TRAINING_KEYS})
    if variant.get("q_dates"):  # one reference time per date of the (regular) series
        base["num_ref_times"] = min(max(int(n) for n in dm.seq_len.values()), MAX_AUTO_REF_TIMES)
    if variant.get("q_auto"):  # model.net.num_ref_times=auto
        base["num_ref_times"] = auto_num_ref_times(dm.seq_len, dm.doy_range)
    # ref_range=auto: the dates' span; "aligned" widens it by half a step each side, so the first
    # and last reference times sit on the first and last dates
    q = int(base.get("num_ref_times", 16)) if variant.get("aligned") else None
    ref_range = auto_ref_range(dm.doy_range, float(base.get("time_scale", 365.0)), q)
    return MTANClassifier(dict(dm.in_channels), num_classes, mlp="linear", ref_range=ref_range, **base)


def swa_network(swa: AveragedModel, train: dict[str, Any], batch_size: int) -> torch.nn.Module:
    """The averaged weights, with batch-norm statistics recomputed on the training pixels."""
    swa.train()
    n = len(train["label"])
    with torch.no_grad():
        for m in swa.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.reset_running_stats()
                m.momentum = None
        for s in range(0, n, batch_size):
            swa(take(train, torch.arange(s, min(s + batch_size, n))))
    return swa.module


def step_loss(
    net: torch.nn.Module, batch: dict[str, Any], smoothing: float, mixup: float, gen: torch.Generator
) -> Tensor:
    """The training cross-entropy of a batch; with ``mixup`` > 0, manifold mixup of the mTAN's
    encoder features (a convex mix of two pixels' features at the reference times and of their
    cross-entropies, ``lam ~ Beta(mixup, mixup)``)."""
    if not mixup:
        return torch.nn.functional.cross_entropy(net(batch), batch["label"], ignore_index=0, label_smoothing=smoothing)
    lam = float(np.random.beta(mixup, mixup))
    perm = torch.randperm(len(batch["label"]), generator=gen)
    fused = net.encode(batch)  # type: ignore[operator]
    logits = net.classify(lam * fused + (1 - lam) * fused[perm])  # type: ignore[operator]
    return lam * torch.nn.functional.cross_entropy(
        logits, batch["label"], ignore_index=0, label_smoothing=smoothing
    ) + (1 - lam) * torch.nn.functional.cross_entropy(
        logits, batch["label"][perm], ignore_index=0, label_smoothing=smoothing
    )


def train_net(
    variant: dict[str, Any], dm: Any, train: dict[str, Any], val: dict[str, Any], seed: int, epochs: int
) -> tuple[float, float, int, float, float, np.ndarray, np.ndarray]:
    """Best validation OA, its macro-F1 and its epoch (1-based); the last epoch's OA, macro-F1 and class
    probabilities ``(N, K - 1)`` (the ``ignore_index`` class left out); the predicted classes of every
    epoch ``(E, N)``.

    Training keys of a variant: ``lr`` (1e-3), ``weight_decay`` (1e-2), ``batch`` (32),
    ``label_smoothing`` (0), ``swa`` (the fraction of the epochs at the end whose weights are
    averaged, batch-norm statistics recomputed on the training pixels; 0 = off), ``tta``
    (augmented validation passes averaged with the clean one; 0 = off), ``mixup`` (manifold
    mixup, Verma et al., ICML 2019: each step mixes every pixel's encoder features at the
    reference times with another pixel's of the batch, ``lam ~ Beta(mixup, mixup)``, and their
    cross-entropies by the same ``lam``; 0 = off).
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    net = build_net(variant, dm)
    augment = SITSAugment.from_config(variant.get("augment"))
    opt = torch.optim.AdamW(
        net.parameters(), lr=float(variant.get("lr", 1e-3)), weight_decay=float(variant.get("weight_decay", 1e-2))
    )
    ema = None
    if variant.get("ema"):
        ema = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(float(variant["ema"])), use_buffers=True)
    swa_start = epochs - round(float(variant.get("swa", 0.0)) * epochs) if variant.get("swa") else epochs
    swa = AveragedModel(net) if variant.get("swa") else None
    bs = int(variant.get("batch", 32))
    smoothing = float(variant.get("label_smoothing", 0.0))
    mixup = float(variant.get("mixup", 0.0))
    n = len(train["label"])
    steps_per_epoch = max(n // bs, 1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
    y_val = val["label"][:, 0, 0].numpy()
    best = (-1.0, 0.0, 0)
    gen = torch.Generator().manual_seed(seed)
    preds: list[np.ndarray] = []
    for epoch in range(epochs):
        net.train()
        order = torch.randperm(n, generator=gen)
        for s in range(steps_per_epoch):
            batch = take(train, order[s * bs : (s + 1) * bs])
            if augment is not None:
                batch = augment(batch)
            loss = step_loss(net, batch, smoothing, mixup, gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if ema is not None:
                ema.update_parameters(net)
        judged = net if ema is None else ema.module
        if swa is not None and epoch >= swa_start:
            swa.update_parameters(net)
            if epoch == epochs - 1:
                judged = swa_network(swa, train, bs)
        judged.eval()
        prob = predict_proba(judged, val, int(variant.get("tta", 0)), augment)
        preds.append(prob.argmax(1) + 1)
        oa, f1 = metrics(preds[-1], y_val)
        if oa > best[0]:
            best = (oa, f1, epoch + 1)
    return (*best, oa, f1, prob, np.stack(preds))


def split_half_selection(preds: np.ndarray, y: np.ndarray, seed: int, repeats: int = 50) -> tuple[float, float]:
    """Is the best-validation epoch better than the last one on pixels that did not choose it?

    ``repeats`` random halves of the validation pixels: the epoch with the best OA on one
    half (the earliest of ties, as the best checkpoint of ``train.py``) and the last epoch
    are both scored on the other half.

    Args:
        preds: ``(E, N)`` predicted classes per epoch.
        y: ``(N,)`` reference classes.

    Returns:
        Mean OA on the held-out halves of the selected epoch and of the last epoch.
    """
    rng = np.random.default_rng(seed)
    correct = preds == y[None]
    sel, last = [], []
    for _ in range(repeats):
        a = rng.permutation(len(y)) < len(y) // 2
        chosen = int(correct[:, a].mean(1).argmax())
        sel.append(correct[chosen, ~a].mean())
        last.append(correct[-1, ~a].mean())
    return float(np.mean(sel)), float(np.mean(last))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="+", help="config overrides, e.g. data=sits_mt9")
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--max-train", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the CPU is shared: more threads only spin
    new = not args.out.exists()
    with args.out.open("a", newline="") as fh:
        writer = csv.writer(fh)

        def emit(row: list[Any]) -> None:
            writer.writerow(row)
            fh.flush()
            print(*row, flush=True)

        if new:
            writer.writerow(["data", "fold", "seed", "variant", "n_train", "val_OA", "val_F1", "best_epoch", "seconds",
                             "last_val_OA", "last_val_F1", "half_selected_OA", "half_last_OA"])  # fmt: skip
        for fold in args.folds:
            dm, train, val = load_fold([*args.overrides, f"data.split.fold={fold}"])
            y = train["label"][:, 0, 0]
            if args.max_train and len(y) > args.max_train:
                rng = np.random.default_rng(fold)
                keep = np.sort(rng.choice(len(y), args.max_train, replace=False))
                train = take(train, torch.from_numpy(keep))
            probs: dict[str, list[np.ndarray]] = {}
            for seed in args.seeds:
                for name in args.variants:
                    variant = VARIANTS[name]
                    t0 = time.perf_counter()
                    if variant.get("rf"):
                        mods = list(dm.in_channels)
                        rf = RandomForestClassifier(500, n_jobs=1, random_state=seed)
                        rf.fit(rf_features(train, mods), train["label"][:, 0, 0].numpy())
                        oa, f1 = metrics(rf.predict(rf_features(val, mods)), val["label"][:, 0, 0].numpy())
                        best_epoch, last_oa, last_f1 = 0, oa, f1
                        half = (oa, oa)
                    else:
                        oa, f1, best_epoch, last_oa, last_f1, prob, preds = train_net(
                            variant, dm, train, val, seed, args.epochs
                        )
                        probs.setdefault(name, []).append(prob)
                        half = split_half_selection(preds, val["label"][:, 0, 0].numpy(), seed)
                    seconds = f"{time.perf_counter() - t0:.0f}"
                    row = [args.overrides[0], fold, seed, name, len(train["label"]), f"{oa:.4f}", f"{f1:.4f}",
                           best_epoch, seconds, f"{last_oa:.4f}", f"{last_f1:.4f}", f"{half[0]:.4f}",
                           f"{half[1]:.4f}"]  # fmt: skip
                    emit(row)
            if len(args.seeds) > 1:  # the seeds' last-epoch probabilities averaged: one ensemble per variant
                y_val = val["label"][:, 0, 0].numpy()
                for name, members in probs.items():
                    oa, f1 = metrics(np.mean(members, axis=0).argmax(1) + 1, y_val)
                    row = [args.overrides[0], fold, "ensemble", name, len(train["label"]), f"{oa:.4f}", f"{f1:.4f}",
                           0, 0, f"{oa:.4f}", f"{f1:.4f}", "", ""]  # fmt: skip
                    emit(row)


if __name__ == "__main__":
    main()
