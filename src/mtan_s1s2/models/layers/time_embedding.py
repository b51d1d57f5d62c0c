"""Learned time embedding of mTAN (Shukla & Marlin, ICLR 2021, arXiv 2101.10318)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TimeEmbedding(nn.Module):
    """``phi(tau) = [w0 * tau + b0, sin(w_i * tau + b_i) for i in 1..E-1]``.

    The linear term lets attention express trends, the periodic terms express phenology.
    Plain ``nn.Linear`` layers, never switched by the ``mlp`` backend. The frequencies are
    initialised log-uniformly between ``min_cycles`` and ``max_cycles`` cycles per unit of
    ``tau`` (one year at the default ``time_scale = 365``), because PyTorch's default
    initialisation gives curves too smooth to separate dates within one season.

    Args:
        embed_dim: Embedding width ``E`` (>= 2).
        min_cycles: Lowest initial frequency, in cycles per unit of ``tau``.
        max_cycles: Highest initial frequency, in cycles per unit of ``tau``.

    Shapes:
        tau: ``(...)`` float, time in years (``doy / time_scale``).
        returns: ``(..., E)`` float32.

    Raises:
        ValueError: If ``embed_dim < 2`` or the frequency range is not positive and ordered.

    If you use this in your research, please cite Shukla & Marlin, "Multi-Time Attention
    Networks for Irregularly Sampled Time Series", ICLR 2021.
    """

    def __init__(self, embed_dim: int = 64, min_cycles: float = 0.5, max_cycles: float = 12.0) -> None:
        super().__init__()
        if embed_dim < 2:
            raise ValueError(f"Time embedding width must be >= 2, got embed_dim={embed_dim}.")
        if not 0 < min_cycles <= max_cycles:
            raise ValueError(
                f"Need 0 < min_cycles <= max_cycles, got min_cycles={min_cycles}, max_cycles={max_cycles}."
            )
        self.embed_dim = embed_dim
        self.linear = nn.Linear(1, 1)
        self.periodic = nn.Linear(1, embed_dim - 1)
        with torch.no_grad():
            cycles = torch.logspace(math.log10(min_cycles), math.log10(max_cycles), embed_dim - 1)
            self.periodic.weight.copy_(2 * math.pi * cycles[:, None])
            self.periodic.bias.uniform_(0.0, 2 * math.pi)

    def forward(self, tau: Tensor) -> Tensor:
        """Embed ``tau`` (see the class docstring for shapes)."""
        t = tau.float().unsqueeze(-1)
        return torch.cat([self.linear(t), torch.sin(self.periodic(t))], dim=-1)
