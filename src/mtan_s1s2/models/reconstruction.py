"""Self-supervised pretraining of the mTAN encoder: reconstruct held-out acquisitions.

The interpolation objective of mTAND (Shukla & Marlin, ICLR 2021, section 3.3): some
acquisitions of every sample are held out of the input, the encoder
(:meth:`~mtan_s1s2.models.mtan.MTANClassifier.encode`) attends the remaining ones onto the
reference times, and a decoder attends the reference-time representation back onto the
held-out dates (multi-time attention the other way round: queries are the held-out dates,
keys the reference times) and predicts their values. The loss is the mean squared error
over the held-out *valid* observations only, in normalised units (``docs/model.md``,
"Self-supervised pretraining"). Held-out dates are drawn per sample and modality, as whole
acquisitions (every pixel of the patch loses that date), like masked-date reconstruction in
SITS-BERT (Yuan & Lin, 2021) and Presto (Tseng et al., 2023).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.layers.mlp import LinearMlp
from mtan_s1s2.models.layers.time_embedding import TimeEmbedding
from mtan_s1s2.models.mtan import ENCODER_MODULES, MTANClassifier


def held_out_dates(mask: Tensor, ratio: float, generator: torch.Generator | None = None) -> Tensor:
    """Draw the acquisitions to hold out of the input, per sample.

    Among the dates valid at some pixel of the patch, ``round(ratio * n)`` are drawn at
    random (at least one when ``n >= 2``), and at least one valid date is always kept as
    input. Padding dates (valid nowhere) are never drawn.

    Args:
        mask: ``(B, T, H, W)`` bool, True = valid observation.
        ratio: Share of the valid dates to hold out, in ``(0, 1)``.
        generator: Random generator (on ``mask``'s device); None = the global one.

    Returns:
        ``(B, T)`` bool, True = held out.

    Raises:
        ValueError: If ``ratio`` is not in ``(0, 1)``.
    """
    if not 0.0 < float(ratio) < 1.0:
        raise ValueError(f"model.mask_ratio must be in (0, 1) (share of dates held out), got {ratio}.")
    B, T = mask.shape[:2]
    date_valid = mask.flatten(2).any(-1)  # (B, T)
    n_valid = date_valid.sum(-1)  # (B,)
    n_held = torch.where(
        n_valid >= 2, (n_valid.float() * ratio).round().long().clamp(1, None), torch.zeros_like(n_valid)
    )
    n_held = torch.minimum(n_held, (n_valid - 1).clamp_min(0))
    noise = torch.rand((B, T), generator=generator, device=mask.device)
    noise = noise.masked_fill(~date_valid, 2.0)  # padding last
    rank = noise.argsort(-1).argsort(-1)  # rank of every date among the sample's dates
    return (rank < n_held[:, None]) & date_valid


def masked_mse_terms(pred: Tensor, target: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Squared error summed over the observations of ``mask`` only, and their count.

    Values of ``target`` under a False mask are never read (they may be NaN).

    Args:
        pred: ``(B, T, C, H, W)`` float, predicted values (normalised units).
        target: ``(B, T, C, H, W)`` float, observed values.
        mask: ``(B, T, H, W)`` bool, True = observation scored.

    Returns:
        ``(total, count)``: float32 scalars, the summed squared error and the number of
        scored values (observations x channels). ``total / count`` is the masked MSE;
        ``count`` is 0 (and ``total`` 0) when nothing is scored.
    """
    C = target.shape[2]
    m = mask[:, :, None]
    diff = torch.where(m, pred.float() - torch.where(m, target, torch.zeros_like(target)).float(), 0.0)
    total = (diff * diff).sum()
    count = mask.sum().to(torch.float32) * C
    return total, count


class TimeDecoder(nn.Module):
    """Attend the reference-time representation back onto observation dates, then to values.

    Queries ``W_q phi(tau)`` of the dates to reconstruct, keys ``W_k phi(ref)`` of the
    reference times (plain ``nn.Linear``, scaled by ``sqrt(E / h)``), a softmax over the
    ``Q`` reference times (every one holds a value), values the encoder's features shared
    by the heads; then a pointwise MLP ``h*d -> hidden -> C``.

    Args:
        embed_time: Time-embedding width ``E``.
        num_heads: Heads ``h`` (divides ``E``).
        d_model: Feature width ``d`` of the encoder.
        out_channels: Channels ``C`` of the modality.
        hidden: Hidden width of the output MLP.

    Raises:
        ValueError: If ``embed_time`` is not divisible by ``num_heads``.
    """

    def __init__(self, embed_time: int, num_heads: int, d_model: int, out_channels: int, hidden: int = 64) -> None:
        super().__init__()
        if num_heads <= 0 or embed_time % num_heads != 0:
            raise ValueError(f"embed_time={embed_time} must be divisible by num_heads={num_heads}.")
        self.num_heads = num_heads
        self.head_dim = embed_time // num_heads
        self.query = nn.Linear(embed_time, embed_time)
        self.key = nn.Linear(embed_time, embed_time)
        self.out = LinearMlp(num_heads * d_model, (hidden,), out_channels)

    def forward(self, feats: Tensor, ref_emb: Tensor, time_emb: Tensor) -> Tensor:
        """Values at the dates of ``time_emb``.

        Args:
            feats: ``(B, Q, d, H, W)`` float, the encoder's features at the reference times.
            ref_emb: ``(Q, E)`` float, embedded reference times.
            time_emb: ``(B, T, E)`` float, embedded dates to reconstruct.

        Returns:
            ``(B, T, C, H, W)`` float32 predicted values.
        """
        B, Q, d, H, W = feats.shape
        q = rearrange(self.query(time_emb.float()), "b t (n e) -> b n t e", n=self.num_heads)
        k = rearrange(self.key(ref_emb.float()), "q (n e) -> n q e", n=self.num_heads)
        scale: float = self.head_dim**0.5
        attn = torch.softmax(torch.einsum("bnte,nqe->bntq", q, k) / scale, dim=-1)  # (B, h, T, Q)
        z = torch.einsum("bntq,bqdp->btndp", attn, rearrange(feats.float(), "b q d h w -> b q d (h w)"))
        z = rearrange(z, "b t n d (h w) -> b t (n d) h w", h=H, w=W)
        out: Tensor = self.out(z)
        return out


class MTANReconstructor(nn.Module):
    """The mTAN encoder with one :class:`TimeDecoder` per modality (``task=pretrain``).

    Args:
        net: The classifier whose encoder is trained (its head is not used).
        mask_ratio: Share of each sample's valid dates held out of the input, ``(0, 1)``.
        decoder_hidden: Hidden width of each decoder's output MLP.

    Raises:
        ValueError: On a ``mask_ratio`` outside ``(0, 1)``.
    """

    def __init__(self, net: MTANClassifier, mask_ratio: float = 0.3, decoder_hidden: int = 64) -> None:
        super().__init__()
        if not 0.0 < float(mask_ratio) < 1.0:
            raise ValueError(f"model.mask_ratio must be in (0, 1) (share of dates held out), got {mask_ratio}.")
        self.net = net
        self.mask_ratio = float(mask_ratio)
        attention = net.encoders[net.modalities[0]].get_submodule("attention")
        emb, heads = int(attention.embed_time), int(attention.num_heads)  # type: ignore[arg-type]
        # attention=kernel has no learned time embedding: the decoder learns its own
        self.time_embedding: TimeEmbedding = (
            net.time_embedding if net.time_embedding is not None else TimeEmbedding(emb)
        )
        d = int(net.fusion.init_kwargs["out_features"])
        self.decoders = nn.ModuleDict(
            {m: TimeDecoder(emb, heads, d, c, decoder_hidden) for m, c in net.in_channels.items()}
        )

    def forward(
        self,
        inputs: Mapping[str, Any],
        held: Mapping[str, Tensor] | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """Hold out dates, encode the others, reconstruct the held-out ones.

        Args:
            inputs: A batch's modalities (``{m: {x, doy, mask}}``, normalised).
            held: Per modality ``(B, T)`` bool dates to hold out; None = drawn with
                :func:`held_out_dates` at ``mask_ratio``.
            generator: Random generator of the drawn dates (on the batch's device).

        Returns:
            ``(total, count, held)``: summed squared error over the held-out valid
            observations of every modality, their count (see :func:`masked_mse_terms`), and
            the dates held out.
        """
        if held is None:
            held = {m: held_out_dates(inputs[m]["mask"], self.mask_ratio, generator) for m in self.net.modalities}
        visible = {
            m: {**inputs[m], "mask": inputs[m]["mask"] & ~held[m][:, :, None, None]} for m in self.net.modalities
        }
        feats = self.net.encode(visible)
        if self.net.fmt == Format.CHANNELS_LAST:
            feats = rearrange(feats, "b h w q d -> b q d h w")
        ref_emb = self.time_embedding(self.net.get_buffer("ref_times"))
        total = feats.new_zeros((), dtype=torch.float32)
        count = feats.new_zeros((), dtype=torch.float32)
        for m, decoder in self.decoders.items():
            x, doy, mask = inputs[m]["x"], inputs[m]["doy"], inputs[m]["mask"]
            target_mask = mask & held[m][:, :, None, None]
            doy = torch.where(held[m], doy, torch.zeros((), dtype=doy.dtype, device=doy.device))
            pred = decoder(feats, ref_emb, self.time_embedding(doy / self.net.time_scale))
            t, c = masked_mse_terms(pred, x, target_mask)
            total, count = total + t, count + c
        return total, count, dict(held)


def encoder_state_dict(net: MTANClassifier) -> dict[str, Tensor]:
    """The encoder's tensors of ``net`` (:data:`~mtan_s1s2.models.mtan.ENCODER_MODULES`), detached on CPU."""
    return {k: v.detach().cpu().clone() for k, v in net.state_dict().items() if k.split(".", 1)[0] in ENCODER_MODULES}


def encoder_parameters(net: MTANClassifier) -> Sequence[nn.Parameter]:
    """The encoder's parameters of ``net`` (frozen by ``model.freeze_encoder_epochs``)."""
    return [p for name in ENCODER_MODULES if getattr(net, name) is not None for p in getattr(net, name).parameters()]


__all__ = [
    "MTANReconstructor",
    "TimeDecoder",
    "encoder_parameters",
    "encoder_state_dict",
    "held_out_dates",
    "masked_mse_terms",
]
