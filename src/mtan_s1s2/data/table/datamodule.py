"""``data=table``: pixel (or parcel) time-series tables, CSV or Parquet, wide or long.

The format of most public SITS datasets (BreizhCrops, TimeSen2Crop, the iota2 and
WorldCereal sample extractions): one row per pixel with one column per band and date
(*wide*), or one row per pixel and date (*long*). The table is read once, checked and
converted to physical units (:mod:`~mtan_s1s2.data.table.reader`); every pixel becomes a
1x1 sample of the batch contract (:mod:`~mtan_s1s2.data.table.dataset`), so the mTAN
model, the baselines, the metrics and the timing work unchanged.

Splits are honest (:mod:`mtan_s1s2.data.group_splits`): whole groups (``group_column``, e.g. a
parcel or polygon id, or spatial blocks of coordinate columns, ``group_blocks``) are dealt
into ``n_folds`` stratified folds, fold ``fold`` is the test split and the next one
validation (``-m data.fold=1,2,3,4,5`` is a cross-validation); or the split is fixed by a
column (``split_column``) or by one file per split (``path: {train: ..., val: ...,
test: ...}``). :meth:`TableDataModule.write_split` writes the split of every pixel to
the run's ``split.csv``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtan_s1s2.data.batch import check_modalities
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule
from mtan_s1s2.data.dates import days_since, resolve_reference_date
from mtan_s1s2.data.group_splits import hold_out_validation, split_of_groups, splits_from_values, write_split
from mtan_s1s2.data.labels import LabelMapping, normalize_code
from mtan_s1s2.data.radiometry import radiometry_per_modality
from mtan_s1s2.data.table.columns import BandColumns
from mtan_s1s2.data.table.dataset import PixelTableDataset
from mtan_s1s2.data.table.reader import (
    Header,
    PixelTable,
    TableFormat,
    TableLayout,
    group_columns,
    read_pixel_table,
)

log = logging.getLogger(__name__)


def _name(column: Any) -> str | None:
    """A column key as the reader names columns (a position of a headerless CSV, ``0``, as ``"0"``)."""
    return None if column is None else str(column)


def labels_as_classes(raw: np.ndarray) -> LabelMapping:
    """A mapping with one class per distinct raw label (``data.labels=null``), in sorted order."""
    codes = sorted(
        {normalize_code(v) for v in raw.tolist() if v is not None and v == v}, key=lambda c: (str(type(c)), c)
    )
    if len(codes) < 2:
        raise ValueError(
            f"The label column holds {len(codes)} distinct value(s) {codes}; at least two classes are needed."
        )
    return LabelMapping.from_config({str(c): [c] for c in codes})


class TableDataModule(SITSDataModule):
    """Train/val/test pixels of a table (config ``data=table``; presets ``data=worldcereal_*``).

    Args:
        path: CSV or Parquet file, or ``{train: file, val: file, test: file}``.
        columns: Modality -> ``{bands: [names], pattern: "..."}``: the column of band
            ``{band}`` at date index ``{t}`` (wide), or of band ``{band}`` (long); ``*``
            matches anything (:mod:`~mtan_s1s2.data.table.columns`).
        modalities: Modalities to read, among those of ``columns`` (default: all of them).
        format: ``wide`` or ``long``.
        header: ``first_row`` (the first row names the columns) or ``none``: a CSV without a
            header row, whose column keys (``label_column``, ``id_column``, ...) are
            positions (0-based) and whose band columns are given by ``positions``
            (:mod:`~mtan_s1s2.data.table.columns`).
        id_column: Pixel id (required by a long table; a wide one uses the row number).
        date_column: Long: each row's date; wide: each row's first date (with ``date_step``).
        dates: Wide: one date per column index.
        date_start: Wide: date of index ``t = 0`` (with ``date_step``).
        date_step: Wide: ``1M`` (months), ``10D`` (days), ``2W`` or a number of days.
        reference_date: Day 0 of ``doy``; None = the day of the earliest date of the table.
        label_column: Column of the raw labels (codes or names).
        labels: ``{classes: {name: [codes]}, ignore_codes: [...], unknown: error|ignore}``
            (:class:`~mtan_s1s2.data.labels.LabelMapping`); None = one class per distinct
            value.
        group_column: Group of each pixel (parcel or polygon id): pixels of a group share
            a split. A list of columns groups by their combination (``[tile, parcel_id]``
            when parcel ids are numbered per tile or scene). None (and no
            ``group_blocks``): every pixel is its own group (warned).
        group_blocks: ``{x: column, y: column, size: side}``: spatial blocks of the
            coordinate columns as groups.
        split_column: Column with a fixed ``train``/``val``/``test`` split (values mapped
            by ``split_names``); None = grouped k-fold.
        split_names: Value -> split name for ``split_column`` (e.g. ``{calibration: train}``).
        n_folds: Folds of the grouped k-fold (>= 3).
        fold: Test fold (1-based); the next fold is validation, the rest training.
        split_seed: Seed of the fold assignment (fixed, so that ``seed`` varies only the model).
        val_fraction: A fixed split without validation pixels (``path: {train, test}`` or a
            split column without ``val``): hold out this share of the training groups for
            validation (grouped, stratified by class; e.g. 0.1). None: the fixed split
            must have its own validation pixels.
        radiometry: Modality -> ``{scale, offset, units, nodata, nodata_rule, dn_offset}``.
        batch_size: Pixels per batch.
        num_workers: DataLoader workers.
        norm_stats: ``auto`` (training split), None or ``{modality: {mean, std}}``.
        predict_split: Split served by ``predict_dataloader``.

    Attributes:
        table: The pixels read (labelled pixels only).
        labels: ``(N,)`` class index of every pixel of ``table``.
        split: ``(N,)`` split of every pixel.
        seq_len: Modality -> dates per pixel when every pixel has the same number, else None.
        doy_range: ``(first, last)`` ``doy`` of the table.

    Raises:
        FileNotFoundError: If a table file does not exist.
        ValueError: On missing columns, dates that do not match the columns, unmapped label
            codes (``labels.unknown: error``), too few groups for the folds, or bad settings;
            every message names the columns, values and counts.
    """

    def __init__(
        self,
        path: str | Mapping[str, str],
        columns: Mapping[str, Mapping[str, Any]],
        modalities: Sequence[str] | None = None,
        format: TableFormat = "wide",
        header: Header = "first_row",
        id_column: str | None = None,
        date_column: str | None = None,
        dates: Sequence[Any] | None = None,
        date_start: Any = None,
        date_step: Any = None,
        reference_date: Any = None,
        label_column: str = "label",
        labels: Mapping[str, Any] | None = None,
        group_column: str | Sequence[str] | None = None,
        group_blocks: Mapping[str, Any] | None = None,
        split_column: str | None = None,
        split_names: Mapping[str, str] | None = None,
        n_folds: int = 5,
        fold: int = 1,
        split_seed: int = 0,
        val_fraction: float | None = None,
        radiometry: Mapping[str, Mapping[str, Any]] | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        norm_stats: str | Mapping[str, Mapping[str, Any]] | None = "auto",
        predict_split: str = "test",
    ) -> None:
        super().__init__(batch_size, num_workers, norm_stats, predict_split)
        if not isinstance(columns, Mapping) or not columns:
            raise ValueError("data.columns must map each modality to {bands: [...], pattern: '...'}.")
        self.modalities = check_modalities(list(columns) if modalities is None else list(modalities))
        specs = {m: BandColumns.from_config(str(m), c) for m, c in columns.items()}
        if group_column is not None and group_blocks:
            raise ValueError("Set data.group_column or data.group_blocks, not both.")
        layout = TableLayout(
            format=format, columns=specs, label_column=str(label_column), id_column=_name(id_column),
            date_column=_name(date_column), dates=None if dates is None else list(dates), date_start=date_start,
            date_step=date_step, group_column=group_column if group_column is None else group_columns(group_column),
            group_blocks={k: _name(v) if k in ("x", "y") else v for k, v in (group_blocks or {}).items()} or None,
            split_column=_name(split_column), radiometry=radiometry_per_modality(radiometry, self.modalities),
            header=header,
        )  # fmt: skip
        self.radiometry = layout.radiometry
        paths: str | dict[str, str] = {str(k): str(v) for k, v in path.items()} if isinstance(path, Mapping) else path
        if isinstance(paths, dict):
            unknown = sorted(set(paths) - set(SPLITS))
            if unknown or "train" not in paths:
                raise ValueError(
                    f"data.path as a mapping needs split names {list(SPLITS)} (train required), got {list(paths)}."
                )
        self._by_files = isinstance(paths, dict)
        table = read_pixel_table(paths, layout, self.modalities)
        where = ", ".join(paths.values()) if isinstance(paths, dict) else str(paths)

        # Labels.
        mapping = LabelMapping.from_config(**dict(labels)) if labels else labels_as_classes(table.labels)
        mapping.check(table.labels, f"{where} (data.label_column={label_column!r})")
        classes = mapping.map(table.labels)
        unlabelled = classes == mapping.ignore_index
        if unlabelled.all():
            raise ValueError(f"{where}: no pixel has a label mapped to a class of data.labels.classes.")
        if unlabelled.any():
            log.info("%s: %d of %d pixels are unlabelled (ignored codes or no label) and left out.", where,
                     int(unlabelled.sum()), len(classes))  # fmt: skip
        self.table: PixelTable = table.subset(~unlabelled)
        self.labels = classes[~unlabelled]
        self.label_mapping = mapping
        self.class_names = mapping.class_names
        self.num_classes = mapping.num_classes
        self.ignore_index = mapping.ignore_index
        self.in_channels = {m: len(specs[m].bands) for m in self.modalities}
        lengths = {m: {len(v) for v in self.table.x[m]} for m in self.modalities}
        self.seq_len: dict[str, int] | None = (
            {m: next(iter(n)) for m, n in lengths.items()} if all(len(n) == 1 for n in lengths.values()) else None
        )
        all_dates = np.concatenate([d for m in self.modalities for d in self.table.dates[m]])
        self.reference_date = (
            resolve_reference_date(reference_date, where=where)
            if reference_date is not None
            else all_dates.min().astype("datetime64[D]").astype("datetime64[s]")
        )
        first, last = days_since(np.asarray([all_dates.min(), all_dates.max()]), self.reference_date).tolist()
        self._doy_range = (float(first), float(last))

        # Splits.
        self.group_name = "+".join(group_columns(group_column)) or (
            "spatial blocks" if group_blocks else (id_column or "row")
        )
        self._check_groups(where, group_column, group_blocks)
        if self.table.split is not None:
            self.split = self._fixed_split(where, split_names, val_fraction, int(split_seed))
        elif val_fraction is not None:
            raise ValueError(
                f"data.val_fraction={val_fraction} holds validation pixels out of a fixed training split, but the "
                "split is a grouped k-fold (its validation is the fold after the test fold); drop data.val_fraction, "
                "or fix the split by files (data.path: {train, test}) or by a column (data.split_column)."
            )
        else:
            by_group = split_of_groups(
                self.table.groups, self.labels, int(n_folds), int(fold), int(split_seed), class_names=self.class_names
            )
            self.split = np.asarray([by_group[g] for g in self.table.groups.tolist()])
        self.fold = None if self.table.split is not None else int(fold)
        self._log_splits(where)

    def _fixed_split(
        self, where: str, names: Mapping[str, str] | None, val_fraction: float | None, seed: int
    ) -> np.ndarray:
        """The fixed split of the table, validation held out of training when ``val_fraction`` is set."""
        assert self.table.split is not None
        source = "data.path has no val file" if self._by_files else "the split column has no val rows"
        split = splits_from_values(self.table.split, names, where=f"{where} (fixed split)", required=("train", "test"))
        has_val = bool((split == "val").any())
        if not has_val and val_fraction is None:
            raise ValueError(
                f"{where}: the fixed split has no validation pixels ({source}). Give them (data.path.val, or val "
                "rows in the split column), or hold out a share of the training groups with data.val_fraction "
                "(e.g. 0.1: grouped and stratified by class)."
            )
        if has_val and val_fraction is not None:
            raise ValueError(
                f"{where}: the fixed split has validation pixels and data.val_fraction={val_fraction} is set too; "
                "drop one of them."
            )
        if val_fraction is not None:
            train = np.flatnonzero(split == "train")
            to_val = hold_out_validation(self.table.groups[train], self.labels[train], float(val_fraction), seed)
            split[train[to_val]] = "val"
            log.info(
                "%s: held out %d of %d training pixels (%d of %d groups) for validation (data.val_fraction=%s).",
                where, int(to_val.sum()), train.size, len(set(self.table.groups[train[to_val]].tolist())),
                len(set(self.table.groups[train].tolist())), val_fraction,
            )  # fmt: skip
        return split

    def _check_groups(
        self, where: str, group_column: str | Sequence[str] | None, group_blocks: Mapping[str, Any] | None
    ) -> None:
        n_groups, n_pixels = len(set(self.table.groups.tolist())), len(self.table)
        if not group_column and not group_blocks:
            log.warning(
                "%s: no data.group_column or data.group_blocks: every pixel is its own group, so pixels of one field "
                "or neighbouring fields can land in both training and test and inflate the test metrics. Set "
                "data.group_column to a parcel/polygon id or data.group_blocks to spatial blocks.", where,
            )  # fmt: skip
        elif n_groups == n_pixels:
            log.warning(
                "%s: the groups (%s) hold one pixel each (%d groups for %d pixels): the split is by pixel, not by "
                "field; neighbouring pixels of one field may be split across train and test.",
                where, self.group_name, n_groups, n_pixels,
            )  # fmt: skip

    def _log_splits(self, where: str) -> None:
        train_classes = set(self.labels[self.split == "train"].tolist())
        for s in SPLITS:
            sel = self.split == s
            n_groups = len(set(self.table.groups[sel].tolist()))
            counts = np.bincount(self.labels[sel], minlength=self.num_classes)
            log.info("%s split: %d pixels in %d group(s) of %s; pixels per class %s", s, int(sel.sum()), n_groups,
                     self.group_name, dict(zip(self.class_names[1:], counts[1:].tolist(), strict=True)))  # fmt: skip
            if n_groups == 1 and self.table.split is not None:
                log.warning("%s: the %s split is a single group of %s: its metrics measure one group only.", where,
                            s, self.group_name)  # fmt: skip
            unseen = sorted(set(self.labels[sel].tolist()) - train_classes)
            if s != "train" and unseen:
                log.warning("%s: the %s split has class(es) %s that the training split lacks.", where, s,
                            [self.class_names[c] for c in unseen])  # fmt: skip

    def write_split(self, output_dir: str | Path) -> Path:
        """Write ``output_dir/split.csv``: one row per pixel, its id, group, split, class index and name."""
        rows = [
            {"id": i, "group": g, "split": s, "label": int(c), "class_name": self.class_names[int(c)]}
            for i, g, s, c in zip(
                self.table.ids.tolist(),
                self.table.groups.tolist(),
                self.split.tolist(),
                self.labels.tolist(),
                strict=True,
            )
        ]
        return write_split(Path(output_dir) / "split.csv", rows)

    def build_dataset(self, split: str, whole: bool = False) -> PixelTableDataset:
        """The pixels of ``split`` (always whole 1x1 samples)."""
        self._check_split(split)
        indices = np.flatnonzero(self.split == split)
        return PixelTableDataset(self.table, indices.tolist(), self.labels, self.reference_date)

    def split_sizes(self) -> dict[str, int]:
        """Pixels per split."""
        return {s: int((self.split == s).sum()) for s in SPLITS}


__all__ = ["TableDataModule", "labels_as_classes"]
