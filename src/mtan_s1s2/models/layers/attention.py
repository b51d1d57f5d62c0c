"""Multi-time attention with per-pixel masks, after mTAN (Shukla & Marlin, ICLR 2021).

Irregular acquisitions of one modality are attended onto ``Q`` shared reference times.
Dates are per sample but validity is per pixel (clouds, no-data), so the masked softmax
over dates factorises exactly (``docs/model.md``, "Multi-time attention")::

    G   = exp(S - max_t S)                      # (B, h, Q, T), per sample
    num = G @ (mask * V)                        # (B, h*Q, d*H*W)
    den = G @ mask                              # (B, h*Q, H*W)
    out = num / den                             # 0 where a pixel has no valid date

With ``intensity=True`` each head also returns ``log(den) + max_t S`` per reference time and
pixel: the log of the attention mass that falls on the pixel's valid dates (the log-sum-exp
of its scores over them), which the normalised ``out`` discards. It says how much valid data
lies near a reference time (a gap, a cloudy month, sparse S1 orbits): a log-mass form of the
observation intensity that Shukla & Marlin add to their uncertainty-aware attention (UnTAN,
HeTVAE, ICLR 2022). A dense, gap-free series gives every pixel the same values.

Two batched matmuls, never a ``(B, h, Q, T, H, W)`` tensor, computed in fp32 whatever the
autocast precision. The tests check it against the direct full masked softmax.
"""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from mtan_s1s2.models.layers.format import Format

ATTENTION_INITS: tuple[str, ...] = ("default", "identity")
"""Initialisations of the query and key projections (``model.net.attention_init``)."""


def kernel_prior(ref_tau: Tensor, tau: Tensor, width: float) -> Tensor:
    """Log-weights of a Laplace kernel between reference times and dates: ``-|tau - ref| / width``.

    Added to the attention scores, it makes each reference time a kernel-weighted average of
    the observations near it (``exp(prior)`` halves every ``width * ln 2`` of ``tau``); the
    log-weight of a date decays linearly, so fp32 weights underflow only ~87 widths away.

    Args:
        ref_tau: ``(Q,)`` float, reference times in ``tau``.
        tau: ``(B, T)`` float, dates in ``tau``.
        width: Kernel width in ``tau`` (> 0).

    Returns:
        ``(B, Q, T)`` float32 log-weights (<= 0).

    Raises:
        ValueError: If ``width`` is not positive.
    """
    if not width > 0:
        raise ValueError(f"The kernel width must be > 0 (in tau), got {width}; check model.net.kernel_width.")
    return -(tau.float()[:, None, :] - ref_tau.float()[None, :, None]).abs() / width


class MultiTimeAttention(nn.Module):
    """Attend a per-pixel masked time series onto reference times.

    Queries are ``W_q phi(ref)``, keys ``W_k phi(tau)`` (plain ``nn.Linear``), scores are
    scaled by ``sqrt(E / h)``; values are the (embedded) series itself, shared by all heads.

    Args:
        embed_time: Time-embedding width ``E``; must be divisible by ``num_heads``.
        num_heads: Number of heads ``h``.
        learned: Learn the scores from the time embedding (mTAN). False: no query and key
            projections; the scores are the ``prior`` given to :meth:`forward` alone (a fixed
            kernel interpolation of the series onto the reference times).
        intensity: Append the log attention mass on valid dates (module docstring) to the
            output: ``h`` more channels per reference time.
        init: ``default`` (PyTorch's initialisation of the query and key projections) or
            ``identity`` (both start as the same permutation of the embedding, every head
            with every other frequency, so a score starts as a sum over frequencies of
            ``phi(ref) phi(tau)``, which peaks where the two dates are close: attention
            starts as a smoother over nearby dates). With the default, initial scores are
            small and nearly uniform over the dates (each reference time sees about the mean
            of the season) and the network must learn the temporal alignment from scratch,
            which is slow on a few hundred pixels.

    Raises:
        ValueError: If ``embed_time`` is not divisible by ``num_heads`` or ``init`` is unknown.

    If you use this in your research, please cite Shukla & Marlin, "Multi-Time Attention
    Networks for Irregularly Sampled Time Series", ICLR 2021 (and, with ``intensity``,
    "Heteroscedastic Temporal Variational Autoencoder for Irregularly Sampled Time Series",
    ICLR 2022).
    """

    def __init__(
        self,
        embed_time: int = 64,
        num_heads: int = 2,
        init: str = "default",
        learned: bool = True,
        intensity: bool = False,
    ) -> None:
        super().__init__()
        if num_heads <= 0 or embed_time % num_heads != 0:
            raise ValueError(
                f"embed_time={embed_time} must be divisible by num_heads={num_heads} "
                "(config keys `model.net.embed_time`, `model.net.num_heads`)."
            )
        self.embed_time = embed_time
        self.num_heads = num_heads
        self.head_dim = embed_time // num_heads
        self.learned = learned
        self.intensity = intensity
        if init not in ATTENTION_INITS:
            raise ValueError(f"model.net.attention_init must be one of {list(ATTENTION_INITS)}, got {init!r}.")
        if not learned:
            return
        self.query = nn.Linear(embed_time, embed_time)
        self.key = nn.Linear(embed_time, embed_time)
        if init == "identity":
            # A permutation, not the plain identity: head k gets embedding dims k, k + h,
            # k + 2h, ..., so every head starts with the whole range of frequencies.
            order = torch.arange(embed_time).reshape(self.head_dim, num_heads).T.reshape(-1)
            with torch.no_grad():
                for layer in (self.query, self.key):
                    layer.weight.copy_(torch.eye(embed_time)[order])
                    layer.bias.zero_()

    def scores(self, ref_emb: Tensor, time_emb: Tensor, prior: Tensor | None = None) -> Tensor:
        """Attention scores.

        Args:
            ref_emb: ``(Q, E)`` float, embedded reference times.
            time_emb: ``(B, T, E)`` float, embedded acquisition dates.
            prior: ``(B, Q, T)`` float log-weights added to every head's scores
                (:func:`kernel_prior`), or None.

        Returns:
            ``(B, h, Q, T)`` float32 scores, scaled by ``sqrt(E / h)``, plus ``prior``.

        Raises:
            ValueError: If the attention is not learned and no ``prior`` is given.
        """
        if not self.learned:
            if prior is None:
                raise ValueError("A MultiTimeAttention with learned=False needs the prior (its only scores).")
            B, Q, T = prior.shape
            return prior.float()[:, None].expand(B, self.num_heads, Q, T)
        q = rearrange(self.query(ref_emb.float()), "q (h e) -> h q e", h=self.num_heads)
        k = rearrange(self.key(time_emb.float()), "b t (h e) -> b h t e", h=self.num_heads)
        scale: float = self.head_dim**0.5
        s = torch.einsum("hqe,bhte->bhqt", q, k) / scale
        return s if prior is None else s + prior.float()[:, None]

    def forward(
        self,
        values: Tensor,
        mask: Tensor,
        ref_emb: Tensor,
        time_emb: Tensor,
        fmt: Format = Format.CHANNELS_FIRST,
        prior: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Masked multi-time attention.

        Args:
            values: ``(B, T, d, H, W)`` float, the embedded series (``(B, T, H, W, d)`` for
                ``Format.CHANNELS_LAST``). Must be finite.
            mask: ``(B, T, H, W)`` bool, True = valid observation.
            ref_emb: ``(Q, E)`` float, embedded reference times.
            time_emb: ``(B, T, E)`` float, embedded acquisition dates.
            fmt: Layout of ``values`` and of the output.
            prior: ``(B, Q, T)`` float log-weights added to the scores (see :meth:`scores`).

        Returns:
            ``out``: ``(B, Q, h*d, H, W)`` float32 (``(B, H, W, Q, h*d)`` for
            ``Format.CHANNELS_LAST``, so that a pixel's reference times are contiguous), 0 at
            pixels without any valid date; with ``intensity``, ``h*d + h`` channels, the
            last ``h`` the log attention mass of each head (0 at pixels without any valid
            date);
            ``available``: ``(B, H, W)`` bool, whether the pixel has a valid date.
        """
        channels_last = fmt == Format.CHANNELS_LAST
        if channels_last:
            B, T, H, W, d = values.shape
        else:
            B, T, d, H, W = values.shape
        Q = ref_emb.shape[0]
        # fp32 whatever the autocast precision (meta tensors, used to count FLOPs, have no autocast)
        with torch.autocast(device_type="cpu" if values.is_meta else values.device.type, enabled=False):
            m = mask.float()
            available = mask.any(dim=1)
            if T == 0:
                c = self.out_channels(d)
                shape = (B, H, W, Q, c) if channels_last else (B, Q, c, H, W)
                return values.new_zeros(shape, dtype=torch.float32), available
            s = self.scores(ref_emb, time_emb, prior)  # (B, h, Q, T)
            # The stabiliser only needs to be constant over t; dates valid nowhere in the
            # patch (padding) are left out so they cannot push the valid ones to underflow.
            date_valid = mask.flatten(2).any(-1)  # (B, T)
            s_max = s.masked_fill(~date_valid[:, None, None, :], float("-inf")).amax(-1, keepdim=True)
            s_max = torch.where(torch.isfinite(s_max), s_max, torch.zeros_like(s_max)).detach()
            g = torch.exp(s - s_max).masked_fill(~date_valid[:, None, None, :], 0.0)
            # Heads and reference times as one row axis: (B, h*Q, T) @ (B, T, ...) reads the
            # values once (a (B, h, Q, T) @ (B, 1, T, ...) matmul would copy them per head).
            g = g.reshape(B, self.num_heads * Q, T)
            den = torch.bmm(g, m.reshape(B, T, H * W))  # (B, h*Q, H*W)
            # den == 0 only where the pixel has no valid date, and there num == 0 exactly:
            # dividing by 1 instead gives output 0 with finite gradients.
            has_valid = den > 0
            safe_den = torch.where(has_valid, den, torch.ones_like(den))
            inv_den = safe_den.reciprocal()
            # s_max is constant over dates, so s_max + log(den) is the log-sum-exp over the valid
            # dates with its exact gradient (the softmax weights) although s_max is detached
            log_mass = (
                torch.where(has_valid, safe_den.log() + s_max.reshape(B, self.num_heads * Q, 1), 0.0)
                if self.intensity
                else None
            )
            if channels_last:
                mv = (values.float() * m[..., None]).reshape(B, T, H * W * d)
                num = torch.bmm(g, mv).view(B, self.num_heads, Q, H * W, d)
                out = num * inv_den.view(B, self.num_heads, Q, H * W, 1)
                out = rearrange(out, "b n q (h w) d -> b h w q (n d)", h=H, w=W)
                if log_mass is not None:
                    mass = rearrange(log_mass, "b (n q) (h w) -> b h w q n", n=self.num_heads, h=H, w=W)
                    out = torch.cat([out, mass], dim=-1)
            else:
                mv = (values.float() * m[:, :, None]).reshape(B, T, d * H * W)
                num = torch.bmm(g, mv).view(B, self.num_heads, Q, d, H * W)
                out = num * inv_den.view(B, self.num_heads, Q, 1, H * W)
                out = rearrange(out, "b n q d (h w) -> b q (n d) h w", h=H, w=W)
                if log_mass is not None:
                    mass = rearrange(log_mass, "b (n q) (h w) -> b q n h w", n=self.num_heads, h=H, w=W)
                    out = torch.cat([out, mass], dim=2)
        return out, available

    def out_channels(self, d: int) -> int:
        """Output channels per reference time for values of width ``d``: ``h*d``, ``+ h`` with intensity."""
        return self.num_heads * (d + 1) if self.intensity else self.num_heads * d


__all__ = ["ATTENTION_INITS", "MultiTimeAttention", "kernel_prior"]
