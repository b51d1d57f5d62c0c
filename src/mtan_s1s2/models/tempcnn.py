"""TempCNN (Pelletier et al., 2019): 1-D convolutions over the dates of each pixel.

The reference deep baseline of pixel SITS classification: three temporal convolutions
(64 filters, kernel 5, batch normalisation, ReLU, dropout), the feature maps flattened
over time, one dense layer of 256 units (batch normalisation, ReLU, dropout) and the class
logits. It sees a regular series: the bands of every modality stacked at each date
index, as in the paper (one multi-band series per pixel). Two ways to get one:

* the data's own dates (``seq_len``): pixel tables whose pixels all have the same dates.
  Invalid observations (mask False) are set to 0 (the channel mean after normalisation),
  and one validity channel per modality tells the network which dates were observed.
* a regular date grid (``date_range``, ``date_step_days``): datacubes, scenes and tables
  whose dates differ between samples or modalities (irregular S2 under clouds, S1 orbits).
  Each pixel's valid observations of every modality are linearly interpolated at dates
  every ``date_step_days`` (temporal gap filling, :mod:`mtan_s1s2.data.date_grid`), as
  the paper's series were; the validity channel of a modality is 1 at the grid dates with
  a valid observation within half a step, else 0.

If you use this in your research, please cite Pelletier, Webb and Petitjean, "Temporal
Convolutional Neural Network for the Classification of Satellite Image Time Series",
Remote Sensing 11(5), 523, 2019.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from mtan_s1s2.data.batch import MODALITY_CHANNELS, pixels_with_data
from mtan_s1s2.data.date_grid import interpolate_images_to_grid, regular_dates
from mtan_s1s2.models.layers.spatial import NeighbourhoodMean, check_neighbourhood_side


class ConvBlock(nn.Module):
    """``Conv1d`` (same padding) -> ``BatchNorm1d`` -> ReLU -> dropout, on ``(N, C, T)``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dropout: float) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.BatchNorm1d(out_channels)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(N, C_in, T)`` -> ``(N, C_out, T)``."""
        out: Tensor = self.drop(self.act(self.norm(self.conv(x))))
        return out


class TempCNN(nn.Module):
    """TempCNN pixel classifier on the batch contract of :mod:`mtan_s1s2.data.batch`.

    Args:
        in_channels: Modality -> bands, e.g. ``{"s2": 10, "s1": 2}`` (``model.net.in_channels``,
            filled from the data).
        num_classes: Logits ``K`` (including the ``ignore_index`` class).
        seq_len: Dates per pixel ``T``, the same for every modality (a number, or a mapping
            filled from the data, ``model.net.seq_len``); None to read every series on the
            date grid ``date_range`` instead.
        filters: Filters of each convolution (64 in the paper).
        kernel_size: Temporal kernel size (5), odd.
        num_layers: Convolutions (3).
        hidden: Units of the dense layer (256).
        dropout: Dropout after every block (0.2 in the paper).
        mask_channels: Add one validity channel per modality.
        date_range: ``[first, last]`` doy (days since the data's reference date) of the
            regular date grid, used when ``seq_len`` is None (filled from the data's dates,
            ``model.net.date_range``).
        date_step_days: Days between grid dates (10: S2's revisit with two satellites,
            the WorldCereal dekads).
        spatial_context: Neighbourhood side ``k`` in pixels: the dense layer also reads,
            beside each pixel's flattened convolution features, their mean over the
            ``k x k`` pixels around it that hold data
            (:class:`~mtan_s1s2.models.layers.spatial.NeighbourhoodMean`, as the mTAN's
            ``model.net.spatial_context`` and the forest's ``model.spatial_context``); ``1`` =
            per pixel, the paper's network.

    Shapes:
        inputs[m]: ``x (B, T, C, H, W)``, ``doy (B, T)`` (days; read only on a date grid:
        with ``seq_len`` the series is read by date index), ``mask (B, T, H, W)``.
        returns: logits ``(B, K, H, W)``.

    Raises:
        ValueError: On unknown modalities, modalities with different date counts, neither
            ``seq_len`` nor ``date_range``, a bad grid, an even kernel, a ``spatial_context``
            that is not 1 or odd >= 3, or (in
            ``forward``) inputs whose shapes disagree with the configuration.
    """

    backend = "tempcnn"
    requested_backend = "tempcnn"

    def __init__(
        self,
        in_channels: Mapping[str, int],
        num_classes: int,
        seq_len: int | Mapping[str, int] | None = None,
        filters: int = 64,
        kernel_size: int = 5,
        num_layers: int = 3,
        hidden: int = 256,
        dropout: float = 0.2,
        mask_channels: bool = True,
        date_range: Sequence[float] | None = None,
        date_step_days: float = 10.0,
        spatial_context: int = 1,
    ) -> None:
        super().__init__()
        unknown = [m for m in in_channels if m not in MODALITY_CHANNELS]
        if not in_channels or unknown:
            raise ValueError(
                f"model.net.in_channels must map modalities among {list(MODALITY_CHANNELS)} to band counts; "
                f"got {dict(in_channels)}."
            )
        if seq_len is None:
            if date_range is None or len(date_range) != 2:
                raise ValueError(
                    "TempCNN needs the dates per pixel of a regular series (model.net.seq_len) or the first and last "
                    f"doy of a date grid to interpolate every series at (model.net.date_range), got date_range="
                    f"{None if date_range is None else list(date_range)}."
                )
            grid = regular_dates(float(date_range[0]), float(date_range[1]), float(date_step_days))
            lengths = {m: int(grid.shape[0]) for m in in_channels}
        else:
            grid = None
            lengths = dict(seq_len) if isinstance(seq_len, Mapping) else {m: int(seq_len) for m in in_channels}
        counts = {int(lengths[m]) for m in in_channels if m in lengths}
        if len(counts) != 1 or any(m not in lengths for m in in_channels):
            raise ValueError(
                "TempCNN stacks the bands of every modality at each date index (Pelletier et al., 2019), so every "
                f"modality needs the same number of dates; model.net.seq_len={lengths} for {list(in_channels)}. "
                "Select modalities with equal dates (data.modalities) or use the mTAN model."
            )
        if kernel_size % 2 == 0:
            raise ValueError(f"model.net.kernel_size must be odd (same padding), got {kernel_size}.")
        self.in_channels = {m: int(in_channels[m]) for m in MODALITY_CHANNELS if m in in_channels}
        self.modalities = list(self.in_channels)
        # seq_len: the date count every input must have (None on a date grid: any dates)
        self.num_dates = counts.pop()
        self.seq_len = None if grid is not None else self.num_dates
        self.date_step_days = float(date_step_days)
        # grid dates, float32 (exact for days up to 2**24): a plain attribute, so that casting
        # the module to bf16 cannot round the dates; moved to the inputs' device by interpolate_to_grid
        self.grid = None if grid is None else grid.float()
        self.num_classes = int(num_classes)
        self.mask_channels = bool(mask_channels)
        width = sum(self.in_channels.values()) + (len(self.modalities) if mask_channels else 0)
        blocks = [ConvBlock(width if i == 0 else filters, filters, kernel_size, dropout) for i in range(num_layers)]
        self.convs = nn.Sequential(*blocks)
        k = check_neighbourhood_side(spatial_context, "model.net.spatial_context")
        self.spatial = NeighbourhoodMean(k) if k != 1 else None
        features = filters * self.num_dates * (2 if self.spatial is not None else 1)
        self.dense = nn.Sequential(nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout))
        self.classifier = nn.Linear(hidden, self.num_classes)

    def check_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Validate a batch against the configuration.

        Raises:
            ValueError: Naming the modality, the expected shape and the config key.
        """
        for m, c in self.in_channels.items():
            if m not in inputs:
                raise ValueError(f"TempCNN was built for modalities {self.modalities} but the batch has no {m!r}.")
            x = inputs[m]["x"]
            if self.seq_len is None:
                if x.ndim != 5 or x.shape[2] != c:
                    raise ValueError(
                        f"{m}.x must have shape (B, T, C={c}, H, W) (model.net.in_channels.{m}); got {tuple(x.shape)}."
                    )
            elif x.ndim != 5 or x.shape[2] != c or x.shape[1] != self.seq_len:
                raise ValueError(
                    f"{m}.x must have shape (B, T={self.seq_len}, C={c}, H, W) (model.net.seq_len, "
                    f"model.net.in_channels.{m}); got {tuple(x.shape)}. TempCNN needs the same dates count in "
                    "every sample (pixel tables with regular dates), or a date grid (model.net.seq_len=null "
                    "model.net.date_range=[first_doy,last_doy])."
                )

    def on_grid(self, x: Tensor, doy: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """One modality's series interpolated at the grid dates.

        Args:
            x: ``(B, T, C, H, W)`` values.
            doy: ``(B, T)`` dates, days.
            mask: ``(B, T, H, W)`` bool, True where valid.

        Returns:
            ``x (B, G, C, H, W)`` (0 for pixels without a valid observation) and
            ``observed (B, G, H, W)``: a valid observation lies within half a step of the
            grid date.
        """
        assert self.grid is not None
        return interpolate_images_to_grid(x, doy.float(), mask, self.grid, self.date_step_days)

    def forward(self, inputs: Mapping[str, Any]) -> Tensor:
        """Per-pixel logits ``(B, K, H, W)`` (see the class docstring)."""
        self.check_inputs(inputs)
        parts: list[Tensor] = []
        masks: list[Tensor] = []
        for m in self.modalities:
            x, mask = inputs[m]["x"], inputs[m]["mask"]
            if self.grid is not None:  # gaps filled in time; mask = observed near the grid date
                x, mask = self.on_grid(x, inputs[m]["doy"], mask)
            else:
                x = torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))
            parts.append(x)
            masks.append(mask[:, :, None].to(x.dtype))
        if self.mask_channels:
            parts += masks
        series = torch.cat(parts, dim=2)  # (B, T, C_all, H, W)
        B, T, C, H, W = series.shape
        z = self.convs(rearrange(series, "b t c h w -> (b h w) c t"))  # (BHW, filters, T)
        flat = rearrange(z, "n f t -> n (f t)")
        if self.spatial is not None:  # each pixel's features and their mean over its neighbours holding data
            image = rearrange(flat, "(b h w) c -> b c h w", b=B, h=H, w=W)
            pooled = self.spatial(image, pixels_with_data(inputs, self.modalities))
            flat = torch.cat([flat, rearrange(pooled, "b c h w -> (b h w) c")], dim=1)
        logits = self.classifier(self.dense(flat))
        out: Tensor = rearrange(logits, "(b h w) k -> b k h w", b=B, h=H, w=W)
        return out


__all__ = ["ConvBlock", "TempCNN"]
