"""Sweep summary from job directories written by hand (no training): rows, CSV, Markdown, plot, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from mtan_s1s2.sweep.aggregate import summarize_sweep, swept_keys
from mtan_s1s2.sweep.jobs import FOLD_KEY, read_job, read_sweep
from mtan_s1s2.sweep.summarize import main, write_summary


def make_job(
    root: Path,
    num: int,
    overrides: list[str],
    epoch_s: list[float] | None = None,
    status: str | None = "completed",
    backend: str = "linear",
    val_oa: list[float] | None = None,
    error: str | None = None,
    write_csv: bool = True,
) -> Path:
    """A job directory as train.py leaves it: .hydra/, summary.json, metrics.csv."""
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (job / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    num: {num}\n")
    epoch_s = epoch_s or []
    val_oa = val_oa or [0.5 + 0.1 * i for i in range(len(epoch_s))]
    if status is not None:
        summary = {
            "backend": backend,
            "status": status,
            "error": error,
            "epochs": [
                {"epoch": i, "train_epoch_s": t, "train_samples_per_s": 8 / t, "warmup": i == 0}
                for i, t in enumerate(epoch_s)
            ],
            "peak_memory_mb": 100.0 + num,
            "seed": 42,
            "hardware": {"cpu": "Test CPU", "torch_threads": 2, "device": "cpu"},
            "versions": {"torch": "2.x"},
        }
        (job / "summary.json").write_text(json.dumps(summary))
    if write_csv and epoch_s:
        with open(job / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["epoch", "step", "time/train_epoch_s", "time/warmup", "val/OA", "val/F1", "val/mIoU"])
            for i, (t, oa) in enumerate(zip(epoch_s, val_oa, strict=True)):
                w.writerow([i, i, "", "", oa, oa / 2, oa / 4])
                w.writerow([i, i, t, int(i == 0), "", "", ""])
    return job


@pytest.fixture
def backend_sweep(tmp_path: Path) -> Path:
    """mlp=linear,conv seed=1,2: conv twice as fast; one conv seed failed."""
    root = tmp_path / "sweep"
    (root).mkdir()
    (root / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - mlp=linear,conv\n    - seed=1,2\n    - data=synthetic_tiny\n"
        "    hydra:\n    - hydra.mode=MULTIRUN\n  runtime:\n    choices:\n      hydra/sweeper: basic\n"
    )
    make_job(root, 0, ["mlp=linear", "seed=1", "data=synthetic_tiny"], [9.0, 2.0, 2.2], val_oa=[0.5, 0.7, 0.6])
    make_job(root, 1, ["mlp=linear", "seed=2", "data=synthetic_tiny"], [9.0, 1.8, 2.0], val_oa=[0.5, 0.6, 0.8])
    make_job(root, 2, ["mlp=conv", "seed=1", "data=synthetic_tiny"], [5.0, 1.0, 1.0], backend="conv")
    make_job(
        root,
        3,
        ["mlp=conv", "seed=2", "data=synthetic_tiny"],
        [5.0],
        backend="conv",
        status="failed",
        error="OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    )
    return root


def test_read_job_prefers_summary_epochs_and_best_val_from_csv(backend_sweep):
    job = read_job(backend_sweep / "1")
    assert job.num == 1 and job.overrides["mlp"] == "linear" and job.seed == "2"
    assert [e.train_epoch_s for e in job.epochs] == [9.0, 1.8, 2.0] and job.epochs[0].warmup
    assert job.best_val == pytest.approx({"OA": 0.8, "F1": 0.4, "mIoU": 0.2})
    assert job.hardware == "Test CPU (2 threads), torch 2.x"


def test_epoch_times_fall_back_to_metrics_csv(tmp_path):
    job_dir = make_job(tmp_path, 0, ["mlp=conv"], [3.0, 1.0], status=None)
    job = read_job(job_dir)
    assert job.status == "incomplete" and "no summary.json" in job.error
    assert [(e.epoch, e.train_epoch_s, e.warmup) for e in job.epochs] == [(0, 3.0, True), (1, 1.0, False)]


def test_rows_pool_seeds_exclude_warmup_and_give_speedup(backend_sweep):
    summary = summarize_sweep(backend_sweep)
    assert summary.keys == ["mlp"]  # data=... is not swept, seed is pooled
    linear, conv, failed = summary.rows
    assert (linear.params, linear.status, linear.seeds, linear.jobs) == (
        {"mlp": "linear"},
        "completed",
        ["1", "2"],
        [0, 1],
    )
    # warm-up epochs (9 s) left out: pooled 2.0, 2.2, 1.8, 2.0
    assert linear.n_timed_epochs == 4
    assert linear.median_train_epoch_s == pytest.approx(2.0)
    assert linear.mean_train_epoch_s == pytest.approx(2.0)
    assert linear.std_train_epoch_s == pytest.approx(0.163299, rel=1e-4)
    assert linear.best_val["OA"] == pytest.approx((0.7 + 0.8) / 2)
    assert linear.peak_memory_mb == 101.0 and linear.speedup_vs_linear == pytest.approx(1.0)
    assert conv.backend == "conv" and conv.seeds == ["1"] and conv.speedup_vs_linear == pytest.approx(2.0)
    assert failed.status == "failed" and failed.seeds == ["2"] and "out of memory" in failed.error
    assert failed.speedup_vs_linear is None
    assert [r.num for r in summary.failed] == [3]
    assert summary.planned_jobs == 4
    assert summary.command.startswith("python train.py -m mlp=linear,conv seed=1,2")


def test_write_summary_files(backend_sweep, capsys):
    summary = write_summary(backend_sweep)
    rows = list(csv.DictReader(open(backend_sweep / "summary.csv")))
    assert [r["mlp"] for r in rows] == ["linear", "conv", "conv"]
    assert [r["status"] for r in rows] == ["completed", "completed", "failed"]
    assert float(rows[1]["speedup_vs_linear"]) == pytest.approx(2.0)
    assert rows[2]["error"].startswith("OutOfMemoryError")
    md = (backend_sweep / "summary.md").read_text()
    assert "| mlp | backend | status |" in md and "2.00x" in md
    assert "job 3 (mlp=conv seed=2): **failed**: OutOfMemoryError" in md
    assert "Hardware: Test CPU (2 threads), torch 2.x." in md
    png = (backend_sweep / "epoch_times.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    out = capsys.readouterr().out
    assert "speed-up" in out and "OutOfMemoryError" in out
    assert len(summary.rows) == 3


def test_swept_keys_from_differing_values_without_multirun_yaml(tmp_path):
    make_job(tmp_path, 0, ["model.optimizer.lr=0.001", "seed=1"], [2.0, 1.0])
    make_job(tmp_path, 1, ["model.optimizer.lr=0.01", "seed=1"], [2.0, 1.0])
    assert swept_keys(read_sweep(tmp_path)) == ["model.optimizer.lr"]


def test_interrupted_sweep_is_summarised(tmp_path):
    """A sweep stopped during its second job: that job has .hydra/ but no summary.json."""
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - mlp=linear,conv\n    - seed=1,2,3\n    hydra: []\n"
    )
    make_job(tmp_path, 0, ["mlp=linear", "seed=1"], [2.0, 1.0])
    make_job(tmp_path, 1, ["mlp=linear", "seed=2"], [2.0], status=None, write_csv=False)
    assert main([str(tmp_path), "--no-plot", "--quiet"]) == 0
    md = (tmp_path / "summary.md").read_text()
    assert "2 jobs (1 completed, 1 incomplete); 4 of 6 planned jobs never started" in md
    assert "job 1 (mlp=linear seed=2): **incomplete**" in md
    assert not (tmp_path / "epoch_times.png").exists()


def test_cli_rejects_a_folder_without_jobs(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "No job directories" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_speedup_below_three_timed_epochs_per_job_is_marked_unreliable(backend_sweep, capsys):
    # every job of backend_sweep times 2 epochs after its warm-up (the failed one 0)
    summary = write_summary(backend_sweep)
    linear, conv, failed = summary.rows
    assert (linear.min_timed_epochs_per_job, conv.min_timed_epochs_per_job) == (2, 2)
    assert conv.speedup_vs_linear == pytest.approx(2.0) and conv.speedup_reliable is False
    assert failed.speedup_reliable is None
    rows = list(csv.DictReader(open(backend_sweep / "summary.csv")))
    assert [r["speedup_reliable"] for r in rows] == ["", "False", ""]  # linear is the reference
    md = (backend_sweep / "summary.md").read_text()
    assert "| 2.00x (unreliable) |" in md and "fewer than 3 non-warm-up epochs" in md
    out = capsys.readouterr().out
    assert "(unreliable)" in out and "fewer than 3 non-warm-up epochs" in out  # the cell may wrap


def test_speedup_from_three_timed_epochs_per_job_is_reliable(tmp_path):
    make_job(tmp_path, 0, ["mlp=linear", "seed=1"], [9.0, 2.0, 2.0, 2.0])
    make_job(tmp_path, 1, ["mlp=conv", "seed=1"], [5.0, 1.0, 1.0, 1.0], backend="conv")
    make_job(tmp_path, 2, ["mlp=conv", "seed=2"], [5.0, 1.0, 1.0], backend="conv")  # 2 timed: this row is not
    make_job(tmp_path, 3, ["mlp=channels_last", "seed=1"], [5.0, 1.0, 1.0, 1.0], backend="channels_last")
    rows = {r.params["mlp"]: r for r in summarize_sweep(tmp_path).rows}
    assert rows["channels_last"].speedup_vs_linear == pytest.approx(2.0) and rows["channels_last"].speedup_reliable
    assert rows["conv"].speedup_reliable is False and rows["linear"].speedup_reliable is None


def _cv_job(
    root: Path, num: int, model: str, fold: int, seed: int, val_oa: float, test_oa: float, fold_key: str = FOLD_KEY
) -> None:
    job = make_job(
        root, num, [f"model={model}", f"{fold_key}={fold}", f"seed={seed}"], [2.0, 1.0], val_oa=[0.1, val_oa]
    )
    summary = json.loads((job / "summary.json").read_text())
    summary["metrics"] = {"test/OA": test_oa, "test/F1": test_oa / 2, "val/OA": val_oa}
    summary["backend"] = "random_forest" if model == "random_forest" else "linear"
    (job / "summary.json").write_text(json.dumps(summary))


def test_cross_validation_rows_pool_folds_and_compare_with_the_baseline(tmp_path):
    """-m model=mtan,random_forest data.split.fold=1,2,3 seed=1,2: one row per model, mean ± std of test metrics."""
    assert FOLD_KEY == "data.split.fold"  # the fold key of every data source
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - model=mtan,random_forest\n    - data.split.fold=1,2,3\n    - seed=1,2\n"
        "    hydra: []\n"
    )
    num = 0
    for model in ("mtan", "random_forest"):
        for fold in (1, 2, 3):
            for seed in (1, 2):
                rf = 0.60 + 0.02 * fold
                test = rf + (0.05 + 0.01 * seed if model == "mtan" else 0.0)
                _cv_job(tmp_path, num, model, fold, seed, val_oa=test - 0.01, test_oa=test)
                num += 1
    summary = write_summary(tmp_path, plot=False, console=False)
    assert summary.keys == ["model"]  # data.split.fold and seed are pooled
    mtan, rf = summary.rows
    assert mtan.folds == ["1", "2", "3"] and len(mtan.records) == 6
    rf_oa = [0.62, 0.62, 0.64, 0.64, 0.66, 0.66]
    assert rf.test_mean["OA"] == pytest.approx(sum(rf_oa) / 6)
    assert rf.test_std["OA"] == pytest.approx(float(np.std(rf_oa, ddof=1)))
    mean, std, n = mtan.delta_vs_ref
    assert (mean, n) == (pytest.approx(0.065), 6) and std == pytest.approx(float(np.std([0.06, 0.07] * 3, ddof=1)))
    assert rf.delta_vs_ref is None
    md = (tmp_path / "summary.md").read_text()
    assert "| model | backend | status | seeds | folds | runs |" in md and "test OA" in md
    assert "Δ test OA vs random_forest" in md and "+0.065 ± 0.005 (6 pairs)" in md
    jobs = list(csv.DictReader(open(tmp_path / "jobs.csv")))
    assert len(jobs) == 12 and jobs[0]["fold"] == "1" and float(jobs[0]["test_OA"]) == pytest.approx(0.68)
    row = next(csv.DictReader(open(tmp_path / "summary.csv")))
    assert float(row["test_OA_mean"]) == pytest.approx(mtan.test_mean["OA"]) and row["folds"] == "1 2 3"


def test_only_data_split_fold_is_pooled_as_the_fold(tmp_path):
    """Another swept key (here a data.fold of an older sweep) is a column of its own: one row per value."""
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - model=mtan,random_forest\n    - data.fold=1,2\n    hydra: []\n"
    )
    for num, (model, fold) in enumerate((m, f) for m in ("mtan", "random_forest") for f in (1, 2)):
        test = 0.8 + 0.01 * fold + (0.02 if model == "mtan" else 0.0)
        _cv_job(tmp_path, num, model, fold, 1, val_oa=test, test_oa=test, fold_key="data.fold")
    summary = write_summary(tmp_path, plot=False, console=False)
    assert summary.keys == ["model", "data.fold"]
    assert len(summary.rows) == 4 and all(r.folds == [] and len(r.records) == 1 for r in summary.rows)
    jobs = list(csv.DictReader(open(tmp_path / "jobs.csv")))
    assert [j["fold"] for j in jobs] == ["", "", "", ""] and [j["data.fold"] for j in jobs] == ["1", "2", "1", "2"]


def test_fraction_of_gemm_peak_per_backend(tmp_path):
    """summary.json utilisation -> the median fraction of the GEMM peak per row, in every output."""
    for num, (backend, fraction) in enumerate([("linear", 0.10), ("linear", 0.14), ("channels_last", 0.25)]):
        job = make_job(tmp_path, num, [f"mlp={backend}", f"seed={num}"], [5.0, 1.0, 1.0, 1.0], backend=backend)
        summary = json.loads((job / "summary.json").read_text())
        summary["utilisation"] = {"flops_per_sample": 1e9, "gemm_peak_gflop_per_s": 100.0, "fraction_of_peak": fraction}
        (job / "summary.json").write_text(json.dumps(summary))
    summary = write_summary(tmp_path, plot=False, console=False)
    rows = {r.params["mlp"]: r for r in summary.rows}
    assert rows["linear"].fraction_of_peak == pytest.approx(0.12) and rows["channels_last"].fraction_of_peak == 0.25
    md = (tmp_path / "summary.md").read_text()
    assert "| of GEMM peak |" in md and "| 12.0 % |" in md and "| 25.0 % |" in md
    csv_rows = {r["mlp"]: r for r in csv.DictReader(open(tmp_path / "summary.csv"))}
    assert float(csv_rows["channels_last"]["fraction_of_peak"]) == pytest.approx(0.25)


def test_summary_md_has_kappa_and_the_table_off_a_terminal_keeps_every_cell_on_one_line(tmp_path):
    """A sweep log (SLURM, nohup: stdout is a file) gets the table at full width, never wrapped."""
    import io

    from mtan_s1s2.sweep.render import print_table

    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - model=mtan,random_forest\n    - data.fold=1,2\n    - seed=1\n"
        "    hydra: []\n"
    )
    for num, (model, fold) in enumerate([("mtan", 1), ("mtan", 2), ("random_forest", 1), ("random_forest", 2)]):
        _cv_job(tmp_path, num, model, fold, 1, val_oa=0.7, test_oa=0.6 + 0.1 * (model == "mtan") + 0.02 * fold)
        path = tmp_path / str(num) / "summary.json"
        record = json.loads(path.read_text())
        record["metrics"]["test/kappa"] = 0.5 + 0.1 * fold
        path.write_text(json.dumps(record))
    summary = write_summary(tmp_path, plot=False, console=False)
    md = (tmp_path / "summary.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| model |"))
    assert "| test OA | test F1 | test mIoU | test kappa |" in header
    mtan_row = next(line for line in md.splitlines() if line.startswith("| mtan |"))
    assert f"| {0.65:.3f} ± {np.std([0.6, 0.7], ddof=1):.3f} |" in mtan_row  # kappa of folds 1 and 2
    out = io.StringIO()  # not a terminal
    print_table(summary, file=out)
    text = out.getvalue()
    lines = text.splitlines()
    for cell in ("train epoch median (s)", "Δ test OA vs random_forest", "test kappa", "+0.100 ± 0.000 (2 pairs)",
                 "0.650 ± 0.071"):  # fmt: skip
        assert any(cell in line for line in lines), (cell, text)
    rows = [line for line in lines if line.startswith("│ mtan") or line.startswith("│ random_forest")]
    assert len(rows) == 2, text  # one line per row: no cell folded onto a second line


def test_parcel_metrics_are_pooled_beside_the_pixel_metrics(tmp_path):
    """Runs with data.split.parcels: test_parcel/* pooled per row (summary.csv, summary.md, jobs.csv)."""
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - model=mtan,random_forest\n    - data.split.fold=1,2\n    hydra: []\n"
    )
    parcel_oa = {("mtan", 1): 0.80, ("mtan", 2): 0.90, ("random_forest", 1): 0.85, ("random_forest", 2): 0.95}
    num = 0
    for model in ("mtan", "random_forest"):
        for fold in (1, 2):
            _cv_job(tmp_path, num, model, fold, 1, val_oa=0.7, test_oa=0.7)
            path = tmp_path / str(num) / "summary.json"
            summary = json.loads(path.read_text())
            oa = parcel_oa[(model, fold)]
            summary["metrics"].update({"test_parcel/OA": oa, "test_parcel/F1": oa - 0.1, "test_parcel/kappa": oa - 0.2})
            summary["metrics"]["test_parcel/n_parcels"] = 24.0
            path.write_text(json.dumps(summary))
            num += 1
    summary = write_summary(tmp_path, plot=False, console=False)
    mtan, rf = summary.rows
    assert mtan.test_parcel_mean["OA"] == pytest.approx(0.85) and rf.test_parcel_mean["OA"] == pytest.approx(0.90)
    assert mtan.test_parcel_std["OA"] == pytest.approx(float(np.std([0.8, 0.9], ddof=1)))
    assert mtan.test_parcel_mean["kappa"] == pytest.approx(0.65)
    md = (tmp_path / "summary.md").read_text()
    assert "parcel test OA" in md and "parcel test kappa" in md and "0.850 ± 0.071" in md
    row = next(csv.DictReader(open(tmp_path / "summary.csv")))
    assert float(row["test_parcel_OA_mean"]) == pytest.approx(0.85)
    jobs = list(csv.DictReader(open(tmp_path / "jobs.csv")))
    assert [float(j["test_parcel_OA"]) for j in jobs] == pytest.approx([0.80, 0.90, 0.85, 0.95])


def test_runs_without_parcels_get_no_parcel_columns(backend_sweep):
    summary = write_summary(backend_sweep, plot=False, console=False)
    assert all(not r.test_parcel_mean for r in summary.rows)
    assert "parcel test" not in (backend_sweep / "summary.md").read_text()


def test_an_override_with_an_interpolation_is_read_as_typed(tmp_path):
    """``'+x=${paths.output_dir}'`` only resolves inside the run: the summary reads it as text."""
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - seed=1,2\n    - +callbacks.probs.output_dir=${paths.output_dir}\n"
        "    hydra:\n    - hydra.run.dir=${oc.env:SCRATCH}/runs\n  runtime:\n    choices:\n      hydra/sweeper: basic\n"
    )
    make_job(tmp_path, 0, ["seed=1", "+callbacks.probs.output_dir=${paths.output_dir}"], [2.0, 1.0])
    make_job(tmp_path, 1, ["seed=2", "+callbacks.probs.output_dir=${paths.output_dir}"], [2.0, 1.0])
    summary = write_summary(tmp_path, plot=False)
    assert [(row.status, row.jobs, row.seeds) for row in summary.rows] == [("completed", [0, 1], ["1", "2"])]
    md = (tmp_path / "summary.md").read_text()
    assert "+callbacks.probs.output_dir=${paths.output_dir}" in md
    assert "hydra.run.dir=${oc.env:SCRATCH}/runs" in md
