"""``epoch_times.png``: training time of every epoch of every job, coloured by row."""

from __future__ import annotations

from pathlib import Path

from mtan_s1s2.sweep.aggregate import BACKEND_KEY, SweepSummary
from mtan_s1s2.sweep.render import short_value


def _row_label(params: dict[str, str], backend: str | None, max_chars: int = 70) -> str:
    rest = " ".join(f"{k.rsplit('.', 1)[-1]}={short_value(v)}" for k, v in params.items() if k != BACKEND_KEY)
    label = f"{backend or '?'}" + (f" ({rest})" if rest else "")
    return label if len(label) <= max_chars else label[: max_chars - 1] + "…"


def plot_epoch_times(summary: SweepSummary, path: str | Path) -> Path:
    """Plot ``time/train_epoch_s`` against epoch, one line per job, one colour per row.

    Warm-up epochs (left out of the statistics) are drawn as hollow markers; failed or
    unfinished jobs as dashed lines. Uses matplotlib's object API (no global pyplot state),
    so it is safe inside a running sweep.

    Args:
        summary: The sweep summary.
        path: Output PNG.

    Returns:
        ``path``.
    """
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(7.5, 4.2), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(summary.rows))]
    plotted = False
    for colour, row in zip(colours, summary.rows, strict=True):
        label: str | None = _row_label(row.params, row.backend)
        if row.status != "completed":
            label = f"{label} [{row.status}]"
        for job in row.records:
            if not job.epochs:
                continue
            x = [e.epoch for e in job.epochs]
            y = [e.train_epoch_s for e in job.epochs]
            style = "-" if row.status == "completed" else "--"
            ax.plot(x, y, style, color=colour, alpha=0.8, label=label)
            steady = [(e.epoch, e.train_epoch_s) for e in job.epochs if not e.warmup]
            warm = [(e.epoch, e.train_epoch_s) for e in job.epochs if e.warmup]
            if steady:
                ax.plot(*zip(*steady, strict=True), "o", color=colour, markersize=4)
            if warm:
                ax.plot(*zip(*warm, strict=True), "o", markerfacecolor="none", color=colour, markersize=5)
            label, plotted = None, True
    ax.set_xlabel("epoch")
    ax.set_ylabel("training time per epoch (s)")
    ax.set_title("Train-epoch time by backend (hollow: warm-up, not in the statistics)", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if plotted:
        ax.legend(fontsize=7)
        last = max(e.epoch for row in summary.rows for job in row.records for e in job.epochs)
        ax.set_xlim(-0.5, last + 0.5)
        if last < 25:
            ax.set_xticks(range(last + 1))
    else:
        ax.text(0.5, 0.5, "no epoch timings recorded", ha="center", va="center", transform=ax.transAxes)
    fig.savefig(path)
    return path


__all__ = ["plot_epoch_times"]
