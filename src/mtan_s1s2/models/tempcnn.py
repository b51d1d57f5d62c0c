"""TempCNN (Pelletier et al., 2019): 1-D convolutions over the dates of each pixel.

The reference deep baseline of pixel SITS classification: three temporal convolutions
(64 filters, kernel 5, batch normalisation, ReLU, dropout), the feature maps flattened
over time, one dense layer of 256 units (batch normalisation, ReLU, dropout) and the class
logits. It sees a regular series: the bands of every modality stacked at each date
index, as in the paper (one multi-band series per pixel). Invalid observations (mask
False) are set to 0 (the channel mean after normalisation), and one validity channel per
modality tells the network which dates were observed.

If you use this in your research, please cite Pelletier, Webb and Petitjean, "Temporal
Convolutional Neural Network for the Classification of Satellite Image Time Series",
Remote Sensing 11(5), 523, 2019.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from mtan_s1s2.data.batch import MODALITY_CHANNELS


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
            filled from the data, ``model.net.seq_len``).
        filters: Filters of each convolution (64 in the paper).
        kernel_size: Temporal kernel size (5), odd.
        num_layers: Convolutions (3).
        hidden: Units of the dense layer (256).
        dropout: Dropout after every block (0.2 in the paper).
        mask_channels: Add one validity channel per modality.

    Shapes:
        inputs[m]: ``x (B, T, C, H, W)``, ``doy (B, T)`` (unused: the series is read by date
        index), ``mask (B, T, H, W)``.
        returns: logits ``(B, K, H, W)``.

    Raises:
        ValueError: On unknown modalities, modalities with different date counts, an even
            kernel, or (in ``forward``) inputs whose shapes disagree with the configuration.
    """

    backend = "tempcnn"
    requested_backend = "tempcnn"

    def __init__(
        self,
        in_channels: Mapping[str, int],
        num_classes: int,
        seq_len: int | Mapping[str, int],
        filters: int = 64,
        kernel_size: int = 5,
        num_layers: int = 3,
        hidden: int = 256,
        dropout: float = 0.2,
        mask_channels: bool = True,
    ) -> None:
        super().__init__()
        unknown = [m for m in in_channels if m not in MODALITY_CHANNELS]
        if not in_channels or unknown:
            raise ValueError(
                f"model.net.in_channels must map modalities among {list(MODALITY_CHANNELS)} to band counts; "
                f"got {dict(in_channels)}."
            )
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
        self.seq_len = counts.pop()
        self.num_classes = int(num_classes)
        self.mask_channels = bool(mask_channels)
        width = sum(self.in_channels.values()) + (len(self.modalities) if mask_channels else 0)
        blocks = [ConvBlock(width if i == 0 else filters, filters, kernel_size, dropout) for i in range(num_layers)]
        self.convs = nn.Sequential(*blocks)
        self.dense = nn.Sequential(
            nn.Linear(filters * self.seq_len, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout)
        )
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
            if x.ndim != 5 or x.shape[2] != c or x.shape[1] != self.seq_len:
                raise ValueError(
                    f"{m}.x must have shape (B, T={self.seq_len}, C={c}, H, W) (model.net.seq_len, "
                    f"model.net.in_channels.{m}); got {tuple(x.shape)}. TempCNN needs the same dates count in "
                    "every sample (pixel tables with regular dates)."
                )

    def forward(self, inputs: Mapping[str, Any]) -> Tensor:
        """Per-pixel logits ``(B, K, H, W)`` (see the class docstring)."""
        self.check_inputs(inputs)
        parts: list[Tensor] = []
        masks: list[Tensor] = []
        for m in self.modalities:
            x, mask = inputs[m]["x"], inputs[m]["mask"]
            parts.append(torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device)))
            masks.append(mask[:, :, None].to(x.dtype))
        if self.mask_channels:
            parts += masks
        series = torch.cat(parts, dim=2)  # (B, T, C_all, H, W)
        B, T, C, H, W = series.shape
        z = self.convs(rearrange(series, "b t c h w -> (b h w) c t"))  # (BHW, filters, T)
        logits = self.classifier(self.dense(rearrange(z, "n f t -> n (f t)")))
        out: Tensor = rearrange(logits, "(b h w) k -> b k h w", b=B, h=H, w=W)
        return out


__all__ = ["ConvBlock", "TempCNN"]
