"""The mtan-style S1/S2 pixel classifier (``docs/model.md``, "The model, block by block").

Irregular, unaligned S2 and S1 (ascending, descending) acquisitions are attended onto
shared reference times with multi-time attention (Shukla & Marlin, ICLR 2021), fused per
reference time, flattened over time and classified per pixel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from einops import rearrange, repeat
from torch import Tensor, nn

from mtan_s1s2.data.batch import MODALITY_CHANNELS
from mtan_s1s2.models.layers.attention import MultiTimeAttention
from mtan_s1s2.models.layers.format import Format
from mtan_s1s2.models.layers.mlp import (
    AUTO_BACKEND,
    MLP_BACKENDS,
    REFERENCE_BACKEND,
    LinearMlp,
    MlpFactory,
    PointwiseMlp,
    mlp_class,
)
from mtan_s1s2.models.layers.norm import FeatureNorm
from mtan_s1s2.models.layers.time_embedding import TimeEmbedding


class ModalityEncoder(nn.Module):
    """One modality: input embedding [MLP], multi-time attention, output projection [MLP].

    Args:
        in_channels: Channels ``C`` of the modality (10 for S2, 3 for S1).
        d_model: Feature width ``d``.
        embed_time: Time-embedding width ``E``.
        num_heads: Attention heads ``h``.
        input_hidden: Hidden width of the input embedding.
        mlp: MLP class (or factory) of the configured backend.
        attention_init: Initialisation of the attention's query and key projections
            (:class:`~mtan_s1s2.models.layers.attention.MultiTimeAttention`).
    """

    def __init__(
        self,
        in_channels: int,
        d_model: int,
        embed_time: int,
        num_heads: int,
        input_hidden: int,
        mlp: MlpFactory,
        attention_init: str = "default",
    ) -> None:
        super().__init__()
        self.embed = mlp(in_channels, (input_hidden,), d_model)
        self.attention = MultiTimeAttention(embed_time, num_heads, attention_init)
        self.proj = mlp(num_heads * d_model, (), d_model)

    def forward(self, x: Tensor, mask: Tensor, ref_emb: Tensor, time_emb: Tensor) -> tuple[Tensor, Tensor]:
        """Encode one modality onto the reference times.

        Args:
            x: ``(B, T, C, H, W)`` float (``(B, T, H, W, C)`` for a channels-last backend),
                already sanitised (finite everywhere).
            mask: ``(B, T, H, W)`` bool, True = valid.
            ref_emb: ``(Q, E)`` embedded reference times.
            time_emb: ``(B, T, E)`` embedded dates.

        Returns:
            ``(B, Q, d, H, W)`` features (``(B, H, W, Q, d)`` channels-last) and
            ``(B, H, W)`` bool availability.
        """
        v = self.embed(x)
        z, available = self.attention(v, mask, ref_emb, time_emb, fmt=self.embed.fmt)
        return self.proj(z.to(v.dtype)), available


class MTANClassifier(nn.Module):
    """Multi-time attention classifier for S1/S2 satellite image time series.

    Inputs follow the batch contract of :mod:`mtan_s1s2.data.batch`: for each modality
    ``m`` in ``in_channels``, ``inputs[m] = {"x": (B, T_m, C_m, H, W) float32,
    "doy": (B, T_m) float32 days since the reference date, "mask": (B, T_m, H, W) bool}``
    (True = valid). Values under a False mask are never read (they may be NaN), nor is the
    ``doy`` of a date that is valid at no pixel of its patch (padding).

    Args:
        in_channels: Modality name -> channel count, e.g. ``{"s2": 10, "s1_asc": 3,
            "s1_desc": 3}``. Config key ``model.net.in_channels`` (filled from the data).
        num_classes: Number of logits ``K`` (including the ``ignore_index`` class).
        mlp: MLP backend for every [MLP] block: a name (``"linear"``, ``"conv"``,
            ``"channels_last"``, ``"auto"``) or an MLP class / partial (config group
            ``mlp``). ``"auto"`` builds ``linear`` blocks until :meth:`set_backend` is
            called with the fastest backend (the training module does this at fit start).
        d_model: Feature width ``d``.
        embed_time: Time-embedding width ``E``.
        num_heads: Attention heads ``h``.
        num_ref_times: Reference times ``Q``.
        ref_range: Reference times are spread evenly over ``[start, end)`` in ``tau``.
        time_scale: ``tau = doy / time_scale`` (days per unit of ``tau``).
        input_hidden: Hidden width of each input embedding (``C -> input_hidden -> d``).
        fusion_hidden: Hidden width of the fusion MLP.
        head_hidden: Hidden widths of the head.
        dropout: Dropout in the head.
        time_min_cycles: Lowest initial frequency of the time embedding, cycles per unit
            of ``tau`` (one year at ``time_scale=365``).
        time_max_cycles: Highest initial frequency (12: monthly detail; long series of
            100-300 dates may want more, short monthly composites fewer).
        attention_init: ``default`` or ``identity`` query/key projections (see
            :class:`~mtan_s1s2.models.layers.attention.MultiTimeAttention`).
        head_norm: Layer-normalise each pixel's flattened ``Q*d`` features before the
            head (:class:`~mtan_s1s2.models.layers.norm.FeatureNorm`). Off by default; on
            small datasets it keeps the head's input at unit scale, so training leaves the
            "predict the majority class" start sooner.

    Shapes:
        returns: logits ``(B, K, H, W)`` float.

    Raises:
        ValueError: On an unknown modality or backend, or (in ``forward``) on inputs whose
            shapes disagree with the configuration.

    If you use this in your research, please cite Shukla & Marlin, "Multi-Time Attention
    Networks for Irregularly Sampled Time Series", ICLR 2021.
    """

    def __init__(
        self,
        in_channels: Mapping[str, int],
        num_classes: int,
        mlp: MlpFactory | str = LinearMlp,
        d_model: int = 64,
        embed_time: int = 64,
        num_heads: int = 2,
        num_ref_times: int = 16,
        ref_range: Sequence[float] = (0.0, 1.0),
        time_scale: float = 365.0,
        input_hidden: int = 64,
        fusion_hidden: int = 128,
        head_hidden: Sequence[int] = (256, 256),
        dropout: float = 0.1,
        time_min_cycles: float = 0.5,
        time_max_cycles: float = 12.0,
        attention_init: str = "default",
        head_norm: bool = False,
    ) -> None:
        super().__init__()
        unknown = [m for m in in_channels if m not in MODALITY_CHANNELS]
        if not in_channels or unknown:
            raise ValueError(
                f"model.net.in_channels must map modalities to channel counts, with modalities "
                f"among {list(MODALITY_CHANNELS)}; got {dict(in_channels)}."
            )
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
        if time_scale <= 0:
            raise ValueError(f"model.net.time_scale must be > 0 days, got {time_scale}.")
        self.requested_backend = mlp_class(mlp).backend
        if self.requested_backend == AUTO_BACKEND:
            mlp = MLP_BACKENDS[REFERENCE_BACKEND]  # until set_backend() picks the fastest
        elif isinstance(mlp, str):
            mlp = mlp_class(mlp)
        self.backend = mlp_class(mlp).backend
        self.fmt = mlp_class(mlp).fmt
        self.in_channels = {m: int(in_channels[m]) for m in MODALITY_CHANNELS if m in in_channels}
        self.modalities = list(self.in_channels)
        self.num_classes = num_classes
        self.time_scale = float(time_scale)
        start, end = (float(v) for v in ref_range)
        ref = start + (end - start) * (torch.arange(num_ref_times, dtype=torch.float32) + 0.5) / num_ref_times
        self.register_buffer("ref_times", ref, persistent=False)
        self.time_embedding = TimeEmbedding(embed_time, time_min_cycles, time_max_cycles)
        self.encoders = nn.ModuleDict(
            {
                m: ModalityEncoder(c, d_model, embed_time, num_heads, input_hidden, mlp, attention_init)
                for m, c in self.in_channels.items()
            }
        )
        n_mod = len(self.modalities)
        self.fusion = mlp(n_mod * d_model + n_mod, (fusion_hidden,), d_model)
        self.head_norm = FeatureNorm(num_ref_times * d_model, self.fmt) if head_norm else None
        self.head = mlp(num_ref_times * d_model, tuple(head_hidden), num_classes, drop=dropout)

    def check_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Validate the shapes of a batch against the configuration.

        Raises:
            ValueError: Naming the modality, the expected shape and the config key.
        """
        hw: tuple[int, int] | None = None
        for m, c in self.in_channels.items():
            if m not in inputs:
                raise ValueError(
                    f"The model was built for modalities {self.modalities} (model.net.in_channels) "
                    f"but the batch has no {m!r}; set data.modalities to match."
                )
            x, doy, mask = inputs[m]["x"], inputs[m]["doy"], inputs[m]["mask"]
            if x.ndim != 5 or x.shape[2] != c:
                raise ValueError(
                    f"{m}.x must have shape (B, T, C={c}, H, W) (model.net.in_channels.{m}={c}); "
                    f"got {tuple(x.shape)}. A missing time axis or a wrong band count means the "
                    "data and model configs disagree."
                )
            B, T, _, H, W = x.shape
            if tuple(doy.shape) != (B, T):
                raise ValueError(f"{m}.doy must have shape (B, T)=({B}, {T}); got {tuple(doy.shape)}.")
            if tuple(mask.shape) != (B, T, H, W) or mask.dtype != torch.bool:
                raise ValueError(
                    f"{m}.mask must be a bool tensor of shape (B, T, H, W)=({B}, {T}, {H}, {W}); "
                    f"got {tuple(mask.shape)} {mask.dtype}."
                )
            if hw is not None and (H, W) != hw:
                raise ValueError(f"All modalities must share H, W; {m} has {(H, W)}, expected {hw}.")
            hw = (H, W)

    def set_backend(self, backend: str) -> None:
        """Switch every [MLP] block to another backend in place, keeping the weights.

        The outputs do not change (to float rounding); parameters are new tensors, so call
        this before creating an optimiser.

        Raises:
            ValueError: If ``backend`` is not a concrete backend name.
        """
        if backend not in MLP_BACKENDS:
            raise ValueError(f"set_backend needs one of {sorted(MLP_BACKENDS)}, got {backend!r}.")
        cls = MLP_BACKENDS[backend]
        for parent in list(self.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, PointwiseMlp):
                    weight = child.get_parameter("fc1.weight")
                    new = cls(**child.init_kwargs).to(device=weight.device, dtype=weight.dtype)
                    new.load_state_dict(child.state_dict())
                    new.train(child.training)
                    setattr(parent, name, new)
        self.backend = backend
        self.fmt = cls.fmt
        if self.head_norm is not None:
            self.head_norm.fmt = cls.fmt

    def forward(self, inputs: Mapping[str, Any]) -> Tensor:
        """Per-pixel logits ``(B, K, H, W)`` for a batch (see the class docstring).

        Channels-first backends keep features ``(B, Q, d, H, W)`` between blocks; the
        channels-last backend converts each input once to ``(B, T, H, W, C)``, keeps
        ``(B, H, W, Q, d)`` between blocks (so the head's ``(B, H, W, Q*d)`` input is a
        view) and converts the logits once at the end.
        """
        self.check_inputs(inputs)
        cl = self.fmt == Format.CHANNELS_LAST
        ref_emb = self.time_embedding(self.ref_times)
        feats: list[Tensor] = []
        flags: list[Tensor] = []
        for m, encoder in self.encoders.items():
            x, doy, mask = inputs[m]["x"], inputs[m]["doy"], inputs[m]["mask"]
            x = torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))
            # A date valid at no pixel (padding) is never attended to; its doy may be NaN
            # and must not reach the time embedding, whose gradient would then be NaN.
            date_valid = mask.flatten(2).any(-1)  # (B, T)
            doy = torch.where(date_valid, doy, torch.zeros((), dtype=doy.dtype, device=doy.device))
            if cl:
                x = rearrange(x, "b t c h w -> b t h w c")
            time_emb = self.time_embedding(doy / self.time_scale)
            z, available = encoder(x, mask, ref_emb, time_emb)
            feats.append(z)
            flags.append(available)
        Q = ref_emb.shape[0]
        if cl:
            a = repeat(torch.stack(flags, dim=-1).to(feats[0].dtype), "b h w m -> b h w q m", q=Q)
            fused = self.fusion(torch.cat([*feats, a], dim=-1))  # (B, H, W, Q, d)
            flat = rearrange(fused, "b h w q d -> b h w (q d)")  # a view
            logits: Tensor = self.head(flat if self.head_norm is None else self.head_norm(flat))
            return rearrange(logits, "b h w k -> b k h w")
        a = repeat(torch.stack(flags, dim=1).to(feats[0].dtype), "b m h w -> b q m h w", q=Q)
        fused = self.fusion(torch.cat([*feats, a], dim=2))  # (B, Q, d, H, W)
        flat = rearrange(fused, "b q d h w -> b (q d) h w")
        logits = self.head(flat if self.head_norm is None else self.head_norm(flat))
        return logits
