"""``data=table``: pixel (or parcel) time-series tables, CSV or Parquet, wide or long.

The format of most public SITS datasets (BreizhCrops, TimeSen2Crop, the iota2 and
WorldCereal sample extractions): one row per pixel with one column per band and date
(*wide*), or one row per pixel and date (*long*). The table is read once, checked and
converted to physical units (:mod:`~mtan_s1s2.data.table.reader`); every pixel becomes a
1x1 sample of the batch contract (:mod:`~mtan_s1s2.data.table.dataset`), so the mTAN
model, the baselines, the metrics and the timing work unchanged.

Splits are honest (:mod:`mtan_s1s2.data.group_splits`), set by ``data.split``: with ``by:
groups``, whole groups (``group_column``, e.g. a parcel or polygon id, or spatial blocks of
coordinate columns, ``blocks``) are dealt into ``n_folds`` stratified folds, fold ``fold``
is the test split and the next one validation (``-m data.split.fold=1,2,3,4,5`` is a
cross-validation); ``by: column`` fixes the split by a column of train/val/test values
(``column``, mapped by ``names``) and ``by: files`` by one file per split (``path:
{train: ..., val: ..., test: ...}``). :meth:`TableDataModule.write_split` writes the
split of every pixel to the run's ``split.csv``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from torch.utils.data import ConcatDataset, Dataset

from mtan_s1s2.data.batch import Sample, check_modalities
from mtan_s1s2.data.config import LABEL_KEYS, SPLIT_KEYS, section
from mtan_s1s2.data.datamodule import SPLITS, SITSDataModule
from mtan_s1s2.data.dates import days_since, resolve_reference_date
from mtan_s1s2.data.group_splits import (
    hold_out_validation,
    split_name_mapping,
    split_of_groups,
    splits_from_values,
    write_split,
)
from mtan_s1s2.data.labels import LabelMapping, normalize_code
from mtan_s1s2.data.parcels import ParcelSpec
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


TableSplitBy = Literal["groups", "column", "files"]
TABLE_SPLIT_BY: tuple[str, ...] = ("groups", "column", "files")
TABLE_SPLIT_KEYS: tuple[str, ...] = (
    *SPLIT_KEYS, "group_column", "blocks", "column", "names", "val_fraction", "parcels",
)  # fmt: skip
"""Keys of ``data.split`` for tables."""
TABLE_LABEL_KEYS: tuple[str, ...] = ("column", *(k for k in LABEL_KEYS if k != "names"))
"""Keys of ``data.labels`` for tables (``names`` is for labels that are already class indices)."""


@dataclass(frozen=True)
class TableSplit:
    """How the pixels of a table are split (config ``data.split``).

    Args:
        by: ``groups`` (grouped, class-stratified k-fold), ``column`` (a fixed split by
            the values of ``column``) or ``files`` (``data.path`` gives one file per split).
        n_folds: Folds of the grouped k-fold (>= 3).
        fold: Test fold (1-based); the next fold is validation, the rest training.
        seed: Seed of the fold assignment (fixed, so that ``seed`` varies only the model).
        group_column: Group of each pixel (parcel or polygon id): pixels of a group share
            a split. A list of columns groups by their combination (``[tile, parcel_id]``
            when parcel ids are numbered per tile or scene). None (and no ``blocks``):
            every pixel is its own group (warned).
        blocks: ``{x: column, y: column, size: side}``: spatial blocks of the coordinate
            columns as groups.
        column: Column of ``train``/``val``/``test`` values (``by: column``).
        names: Value -> split name for ``column`` (e.g. ``{calibration: train}``).
        val_fraction: A fixed split without validation pixels (``path: {train, test}`` or a
            split column without ``val``): hold out this share of the training groups for
            validation (grouped, stratified by class, seeded by ``seed``; e.g. 0.1). None:
            the fixed split must have its own validation pixels.

    Raises:
        ValueError: On an unknown ``by``, or settings that do not go together (each
            message names the keys and the fix).
    """

    by: str = "groups"
    n_folds: int = 5
    fold: int = 1
    seed: int = 0
    group_column: str | Sequence[str] | None = None
    blocks: Mapping[str, Any] | None = None
    column: str | int | None = None
    names: Mapping[str, str] | None = None
    val_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.by not in TABLE_SPLIT_BY:
            raise ValueError(f"data.split.by must be one of {list(TABLE_SPLIT_BY)}, got {self.by!r}.")
        if self.group_column and self.blocks:
            raise ValueError("Set data.split.group_column or data.split.blocks, not both.")
        if self.by == "column" and not self.column:
            raise ValueError(
                "data.split.by=column needs data.split.column: the column of train/val/test values (mapped by "
                "data.split.names)."
            )
        if self.by != "column" and (self.column or self.names):
            raise ValueError(
                f"data.split.column / data.split.names are read by data.split.by=column only, but data.split.by="
                f"{self.by}; set data.split.by=column for a fixed split by a column, or drop them."
            )
        if self.by == "groups" and self.val_fraction is not None:
            raise ValueError(
                f"data.split.val_fraction={self.val_fraction} holds validation pixels out of a fixed training split, "
                "but the split is a grouped k-fold (its validation is the fold after the test fold); drop "
                "data.split.val_fraction, or fix the split by files (data.split.by=files) or by a column "
                "(data.split.by=column)."
            )

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, path: str | Mapping[str, str]) -> TableSplit:
        """From ``data.split``, checked against ``data.path`` (a mapping of files needs ``by: files``).

        Raises:
            ValueError: On an unknown key, or ``by: files`` without one file per split
                (and the reverse).
        """
        values = section(cfg, TABLE_SPLIT_KEYS, "data.split")
        values.pop("parcels", None)  # read by TableDataModule (mtan_s1s2.data.parcels)
        if values.get("group_column") is not None and not isinstance(values["group_column"], str):
            values["group_column"] = group_columns(values["group_column"])
        split = cls(**values)
        if isinstance(path, Mapping) and split.by != "files":
            raise ValueError(
                f"data.path gives one file per split ({list(path)}), but data.split.by={split.by}; set "
                "data.split.by=files."
            )
        if not isinstance(path, Mapping) and split.by == "files":
            raise ValueError(
                f"data.split.by=files needs data.path={{train: file, val: file, test: file}}, got {path!r}."
            )
        return split

    @property
    def fixed(self) -> bool:
        """True when the split is given (by a column or by files), not drawn into folds."""
        return self.by != "groups"


def labels_as_classes(raw: np.ndarray, ignore_codes: Sequence[Any] = ()) -> LabelMapping:
    """A mapping with one class per distinct raw label (``data.labels.classes=null``), in sorted order.

    Args:
        raw: ``(N,)`` raw labels (NaN / None = no label).
        ignore_codes: Labels that are no class (mapped to ``ignore_index``).

    Raises:
        ValueError: If fewer than two classes remain.
    """
    ignored = {normalize_code(v) for v in ignore_codes}
    codes = sorted(
        {normalize_code(v) for v in raw.tolist() if v is not None and v == v} - ignored,
        key=lambda c: (str(type(c)), c),
    )
    if len(codes) < 2:
        raise ValueError(
            f"The label column holds {len(codes)} distinct value(s) {codes}; at least two classes are needed."
        )
    return LabelMapping.from_config({str(c): [c] for c in codes}, sorted(ignored, key=str))


def label_mapping(raw: np.ndarray, labels: Mapping[str, Any]) -> LabelMapping:
    """The mapping of ``data.labels`` (without ``column``): its ``classes``, else one class per distinct value.

    Raises:
        ValueError: As :meth:`~mtan_s1s2.data.labels.LabelMapping.from_config` and
            :func:`labels_as_classes`.
    """
    if labels.get("classes"):
        return LabelMapping.from_config(
            labels["classes"], labels.get("ignore_codes") or (), labels.get("unknown", "error")
        )
    return labels_as_classes(raw, labels.get("ignore_codes") or ())


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
            header row, whose column keys (``labels.column``, ``id_column``, ...) are
            positions (0-based) and whose band columns are given by ``positions``
            (:mod:`~mtan_s1s2.data.table.columns`).
        id_column: Pixel id (required by a long table; a wide one uses the row number).
        date_column: Long: each row's date; wide: each row's first date (with ``date_step``).
        dates: Wide: one date per column index.
        date_start: Wide: date of index ``t = 0`` (with ``date_step``).
        date_step: Wide: ``1M`` (months), ``10D`` (days), ``2W`` or a number of days.
        reference_date: Day 0 of ``doy``; None = the day of the earliest date of the table.
        labels: ``{column: name, classes: {name: [codes]}, ignore_codes: [...], unknown:
            error|ignore}``: the column of the raw labels (codes or names; default
            ``label``) and their mapping to classes
            (:class:`~mtan_s1s2.data.labels.LabelMapping`); ``classes: null`` = one class
            per distinct value.
        split: ``{by: groups|column|files, n_folds, fold, seed, group_column, blocks: {x,
            y, size}, column, names, val_fraction}`` (:class:`TableSplit`); None = grouped 5-fold, fold 1;
            plus ``parcels: {column: <parcel-id column or list of columns>}``
            (:class:`~mtan_s1s2.data.parcels.ParcelSpec`): the test then reports parcel
            metrics and prediction aggregates per parcel.
        radiometry: Modality -> ``{scale, offset, units, nodata, nodata_rule, dn_offset}``.
        batch_size: Pixels per batch.
        num_workers: DataLoader workers.
        norm_stats: ``auto`` (training split), None or ``{modality: {mean, std}}``.
        predict_split: Split served by ``predict_dataloader``.
        derived: ``data.derived``: derived inputs (spectral indices, the S1 cross-ratio;
            :mod:`mtan_s1s2.data.derived`) appended to the channels of their modality.

    Attributes:
        table: The pixels read (labelled pixels only).
        labels: ``(N,)`` class index of every pixel of ``table``.
        split: ``(N,)`` split of every pixel.
        split_cfg: The ``data.split`` settings.
        parcel_ids: ``(N,) int64`` parcel index of every pixel of ``table`` (with
            ``split.parcels``), else None.
        parcel_names: The parcel id of every index (as text).
        seq_len: Modality -> dates per pixel when every pixel has the same number, else None.
        doy_range: ``(first, last)`` ``doy`` of the table.

    Raises:
        FileNotFoundError: If a table file does not exist.
        ValueError: On missing columns, dates that do not match the columns, unmapped label
            codes (``labels.unknown: error``), too few groups for the folds, or bad settings;
            every message names the columns, values and counts.
    """

    bands_key = "data.columns.{modality}.bands"
    rasters = False

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
        labels: Mapping[str, Any] | None = None,
        split: Mapping[str, Any] | None = None,
        radiometry: Mapping[str, Mapping[str, Any]] | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        norm_stats: str | Mapping[str, Mapping[str, Any]] | None = "auto",
        predict_split: str = "test",
        derived: Sequence[str] | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, norm_stats, predict_split, derived)
        if not isinstance(columns, Mapping) or not columns:
            raise ValueError("data.columns must map each modality to {bands: [...], pattern: '...'}.")
        self.modalities = check_modalities(list(columns) if modalities is None else list(modalities))
        specs = {m: BandColumns.from_config(str(m), c) for m, c in columns.items()}
        self._set_bands(specs)
        label_cfg = {"column": "label", **section(labels, TABLE_LABEL_KEYS, "data.labels")}
        label_column = str(label_cfg.pop("column"))
        self.split_cfg = TableSplit.from_config(split, path)
        sp, self.parcel_spec = self.split_cfg, ParcelSpec.from_config(dict(split or {}).get("parcels"), "tables")
        layout = TableLayout(
            format=format, columns=specs, label_column=label_column, id_column=_name(id_column),
            date_column=_name(date_column), dates=None if dates is None else list(dates), date_start=date_start,
            date_step=date_step, group_column=sp.group_column,
            group_blocks={k: _name(v) if k in ("x", "y") else v for k, v in (sp.blocks or {}).items()} or None,
            split_column=_name(sp.column) if sp.by == "column" else None,
            parcel_columns=tuple(str(c) for c in self.parcel_spec.columns()) if self.parcel_spec else (),
            radiometry=radiometry_per_modality(radiometry, self.modalities), header=header,
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
        mapping = label_mapping(table.labels, label_cfg)
        mapping.check(table.labels, f"{where} (data.labels.column={label_column!r})")
        classes = mapping.map(table.labels)
        unlabelled = classes == mapping.ignore_index
        if unlabelled.all():
            raise ValueError(f"{where}: no pixel has a label mapped to a class of data.labels.classes.")
        self.table: PixelTable = table.subset(~unlabelled)
        self.labels = classes[~unlabelled]
        self.label_mapping = mapping
        self.parcel_ids, self.parcel_names = self._parcel_index(where)
        self.class_names = mapping.class_names
        self.num_classes = mapping.num_classes
        self.ignore_index = mapping.ignore_index
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
        self.group_name = "+".join(group_columns(sp.group_column)) or (
            "spatial blocks" if sp.blocks else (id_column or "row")
        )
        self._check_groups(where)
        if self.table.split is not None:
            self.split = self._fixed_split(where, sp.names, sp.val_fraction, int(sp.seed))
        else:
            by_group = split_of_groups(
                self.table.groups,
                self.labels,
                int(sp.n_folds),
                int(sp.fold),
                int(sp.seed),
                class_names=self.class_names,
            )
            self.split = np.asarray([by_group[g] for g in self.table.groups.tolist()])
        self.fold = None if sp.fixed else int(sp.fold)
        self.unlabelled_table, self.unlabelled_split = self._unlabelled_pixels(table, unlabelled, where)
        self._log_splits(where)

    def _unlabelled_pixels(
        self, table: PixelTable, unlabelled: np.ndarray, where: str
    ) -> tuple[PixelTable | None, np.ndarray | None]:
        """The unlabelled pixels of ``table`` (bool ``(N,)`` mask) and the split of each; Nones without any.

        A pixel takes the split of its group when labelled pixels share the group, so an
        unlabelled pixel of a validation or test field or block never reaches training;
        otherwise its own value of the fixed split (split column or file; a value that names
        no split: none, the pixel is never served), otherwise ``train`` (its group is in no
        validation or test area).
        """
        if not unlabelled.any():
            return None, None
        log.info("%s: %d of %d pixels are unlabelled (ignored codes or no label): left out of training and metrics, "
                 "read by task=pretrain.", where, int(unlabelled.sum()), unlabelled.size)  # fmt: skip
        pixels = table.subset(unlabelled)
        of_group = dict(zip(self.table.groups.tolist(), self.split.tolist(), strict=True))
        if pixels.split is not None:
            names = split_name_mapping(self.split_cfg.names)
            own = [names.get(str(v), "") for v in pixels.split.tolist()]
        else:
            own = ["train"] * len(pixels)
        groups = pixels.groups.tolist()
        return pixels, np.asarray([of_group.get(g, s) for g, s in zip(groups, own, strict=True)])

    def _parcel_index(self, where: str) -> tuple[np.ndarray | None, list[str]]:
        """``(parcel_ids, parcel_names)`` of the table's parcel column (``(None, [])`` without one)."""
        if self.table.parcels is None or self.parcel_spec is None:
            return None, []
        codes, values = pd.factorize(self.table.parcels, sort=True)
        names = [str(v) for v in values.tolist()]
        log.info("%s: %d parcels (data.split.parcels.column=%s) of %d pixels", where, len(names),
                 "+".join(self.parcel_spec.columns()), len(codes))  # fmt: skip
        return np.asarray(codes, np.int64), names

    def _set_bands(self, specs: Mapping[str, BandColumns]) -> None:
        """Band names and channels from ``data.columns``, so ``data.derived`` is checked before the table is read.

        A modality without columns is left to the reader, which refuses it.
        """
        self.bands = {m: tuple(specs[m].bands) for m in self.modalities if m in specs}
        self.in_channels = {m: len(specs[m].bands) for m in self.modalities if m in specs}

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
                "rows in the split column), or hold out a share of the training groups with data.split.val_fraction "
                "(e.g. 0.1: grouped and stratified by class)."
            )
        if has_val and val_fraction is not None:
            raise ValueError(
                f"{where}: the fixed split has validation pixels and data.split.val_fraction={val_fraction} is set "
                "too; "
                "drop one of them."
            )
        if val_fraction is not None:
            train = np.flatnonzero(split == "train")
            to_val = hold_out_validation(self.table.groups[train], self.labels[train], float(val_fraction), seed)
            split[train[to_val]] = "val"
            log.info(
                "%s: held out %d of %d training pixels (%d of %d groups) for validation (data.split.val_fraction=%s).",
                where, int(to_val.sum()), train.size, len(set(self.table.groups[train[to_val]].tolist())),
                len(set(self.table.groups[train].tolist())), val_fraction,
            )  # fmt: skip
        return split

    def _check_groups(self, where: str) -> None:
        n_groups, n_pixels = len(set(self.table.groups.tolist())), len(self.table)
        if not self.split_cfg.group_column and not self.split_cfg.blocks:
            log.warning(
                "%s: no data.split.group_column or data.split.blocks: every pixel is its own group, so pixels of one "
                "field or neighbouring fields can land in both training and test and inflate the test metrics. Set "
                "data.split.group_column to a parcel/polygon id or data.split.blocks to spatial blocks.", where,
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
        return PixelTableDataset(self.table, indices.tolist(), self.labels, self.reference_date, self.parcel_ids)

    def build_unlabelled_dataset(self, split: str) -> Dataset[Sample]:
        """The pixels of ``split`` with the table's unlabelled pixels of its area, for ``task=pretrain``.

        Unlabelled pixels (ignored codes, no label, or unmapped codes with ``labels.unknown:
        ignore``) are left out of training and metrics but hold observations to
        reconstruct; each belongs to the split of its group (:meth:`_unlabelled_pixels`).
        Samples are those of :class:`~mtan_s1s2.data.table.dataset.PixelTableDataset`
        without ``parcel``; the unlabelled ones carry ``ignore_index`` as label.

        Raises:
            ValueError: On an unknown split.
        """
        self._check_split(split)
        labelled = PixelTableDataset(
            self.table, np.flatnonzero(self.split == split).tolist(), self.labels, self.reference_date
        )
        indices = (
            np.flatnonzero(self.unlabelled_split == split)
            if self.unlabelled_split is not None
            else np.empty(0, np.int64)
        )
        log.info("task=pretrain: %s split: %d labelled and %d unlabelled pixels", split, len(labelled), indices.size)
        if split == "train" and not indices.size:
            log.warning(
                "task=pretrain: the table has no unlabelled pixel in the training split, so the encoder pretrains on "
                "the %d pixels fine-tuning will train on. On the pixel tables measured this gained nothing (validation "
                "OA -2.8 points on worldcereal_table, -0.3 on sits_mt9; docs/results.md, 'Pretraining on the pixel "
                "tables'); pretraining paid where unlabelled pixels outnumber the labels (the WorldCereal datacube "
                "with 10 %% of its labels). Add the unlabelled pixels of the area as rows without a label.",
                len(labelled),
            )
        if self.unlabelled_table is None or not indices.size:
            return labelled
        no_label = np.full(len(self.unlabelled_table), self.ignore_index, np.int64)
        unlabelled = PixelTableDataset(self.unlabelled_table, indices.tolist(), no_label, self.reference_date)
        return ConcatDataset([labelled, unlabelled])

    def split_sizes(self) -> dict[str, int]:
        """Pixels per split."""
        return {s: int((self.split == s).sum()) for s in SPLITS}


__all__ = [
    "TABLE_LABEL_KEYS",
    "TABLE_SPLIT_KEYS",
    "TableDataModule",
    "TableSplit",
    "label_mapping",
    "labels_as_classes",
]
