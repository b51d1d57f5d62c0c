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

from mtan_s1s2.data.batch import MODALITY_CHANNELS, pixels_with_data
from mtan_s1s2.data.date_grid import interpolate_images_to_grid, window_mean_images_to_grid
from mtan_s1s2.models.layers.attention import MultiTimeAttention, kernel_prior
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
from mtan_s1s2.models.layers.spatial import (
    SPATIAL_POOLS,
    NeighbourhoodAttention,
    NeighbourhoodMean,
    NeighbourhoodPool,
    NeighbourhoodSimilarity,
    check_neighbourhood_side,
)
from mtan_s1s2.models.layers.time_embedding import TimeEmbedding

ENCODER_MODULES: tuple[str, ...] = ("time_embedding", "encoders", "fusion")
"""The submodules of :class:`MTANClassifier` that form its encoder (:meth:`MTANClassifier.encode`):
what ``task=pretrain`` trains and saves, and ``model.pretrained`` loads (``time_embedding`` is
None with ``attention=kernel``). The head (``conv_head``, ``head_norm``, ``head``) is the
classifier's own."""

ENCODER_KEYS: tuple[str, ...] = (
    "in_channels", "d_model", "embed_time", "num_heads", "num_ref_times", "ref_range", "time_scale",
    "input_hidden", "fusion_hidden", "attention", "kernel_width", "intensity",
)  # fmt: skip
"""The constructor arguments of :class:`MTANClassifier` that the encoder's weights depend on
(shapes, or the meaning of the reference times), recorded with pretrained encoders."""


class ModalityEncoder(nn.Module):
    """One modality: input embedding [MLP], multi-time attention, output projection [MLP].

    Args:
        in_channels: Channels ``C`` of the modality (10 for S2, 3 for S1).
        d_model: Feature width ``d``.
        embed_time: Time-embedding width ``E``.
        num_heads: Attention heads ``h``.
        input_hidden: Hidden width of the input embedding; 0 = one linear projection
            ``C -> d`` (no hidden layer, no activation).
        mlp: MLP class (or factory) of the configured backend.
        attention_init: Initialisation of the attention's query and key projections
            (:class:`~mtan_s1s2.models.layers.attention.MultiTimeAttention`).
        learned_attention: Learned scores (mTAN); False = the kernel prior's scores only.
        intensity: Feed the log attention mass on valid dates of each head to the output
            projection (``h*d + h -> d``), see
            :class:`~mtan_s1s2.models.layers.attention.MultiTimeAttention`.
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
        learned_attention: bool = True,
        intensity: bool = False,
    ) -> None:
        super().__init__()
        self.embed = mlp(in_channels, (input_hidden,) if input_hidden else (), d_model)
        self.attention = MultiTimeAttention(
            embed_time, num_heads, attention_init, learned=learned_attention, intensity=intensity
        )
        self.proj = mlp(self.attention.out_channels(d_model), (), d_model)

    def forward(
        self, x: Tensor, mask: Tensor, ref_emb: Tensor, time_emb: Tensor, prior: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Encode one modality onto the reference times.

        Args:
            x: ``(B, T, C, H, W)`` float (``(B, T, H, W, C)`` for a channels-last backend),
                already sanitised (finite everywhere).
            mask: ``(B, T, H, W)`` bool, True = valid.
            ref_emb: ``(Q, E)`` embedded reference times.
            time_emb: ``(B, T, E)`` embedded dates.
            prior: ``(B, Q, T)`` log-weights added to the attention scores, or None.

        Returns:
            ``(B, Q, d, H, W)`` features (``(B, H, W, Q, d)`` channels-last) and
            ``(B, H, W)`` bool availability.
        """
        v = self.embed(x)
        z, available = self.attention(v, mask, ref_emb, time_emb, fmt=self.embed.fmt, prior=prior)
        return self.proj(z.to(v.dtype)), available


REF_VALUES_MODES: dict[bool | str, str | None] = {False: None, True: "linear", "linear": "linear", "mean": "mean"}
"""``model.net.ref_values`` -> how :meth:`MTANClassifier.reference_values` reads the series (None: not at all)."""


def padding_doy_zeroed(doy: Tensor, mask: Tensor) -> Tensor:
    """``doy`` ``(B, T)`` with 0 at the dates valid at no pixel of ``mask`` ``(B, T, H, W)`` (padding, NaN allowed)."""
    date_valid = mask.flatten(2).any(-1)  # (B, T)
    return torch.where(date_valid, doy, torch.zeros((), dtype=doy.dtype, device=doy.device))


AUTO_SPATIAL_CONTEXT = 3
"""The neighbourhood side, pixels, that ``model.net.spatial_context=auto`` gives rasters."""

ATTENTIONS: tuple[str, ...] = ("learned", "kernel", "learned_kernel")
"""How the series are attended onto the reference times (``model.net.attention``)."""

HEADS: tuple[str, ...] = ("flatten", "conv", "gru")
"""How the reference-time features are classified (``model.net.head``)."""


def pixel_sequences(x: Tensor, fmt: Format) -> tuple[Tensor, tuple[int, int, int]]:
    """One sequence of reference-time features per pixel, for the temporal heads.

    Args:
        x: ``(B, Q, d, H, W)`` float (``(B, H, W, Q, d)`` for ``Format.CHANNELS_LAST``).
        fmt: Layout of ``x``.

    Returns:
        ``(B*H*W, Q, d)`` (pixels in ``b h w`` order) and ``(B, H, W)``.
    """
    if fmt == Format.CHANNELS_LAST:
        B, H, W = x.shape[:3]
        return rearrange(x, "b h w q d -> (b h w) q d"), (B, H, W)
    B, H, W = x.shape[0], x.shape[3], x.shape[4]
    return rearrange(x, "b q d h w -> (b h w) q d"), (B, H, W)


def to_pixel_layout(features: Tensor, size: tuple[int, int, int], fmt: Format) -> Tensor:
    """Per-pixel features back to the model's layout, the inverse of :func:`pixel_sequences`'s flattening.

    Args:
        features: ``(B*H*W, k)`` float, pixels in ``b h w`` order.
        size: ``(B, H, W)``.
        fmt: Layout of the output.

    Returns:
        ``(B, k, H, W)`` (``(B, H, W, k)`` for ``Format.CHANNELS_LAST``).
    """
    B, H, W = size
    pattern = "(b h w) k -> b h w k" if fmt == Format.CHANNELS_LAST else "(b h w) k -> b k h w"
    out: Tensor = rearrange(features, pattern, b=B, h=H, w=W)
    return out


class TemporalConvHead(nn.Module):
    """Temporal convolutions over the reference-time features of each pixel (TempCNN-style).

    ``Conv1d`` over the ``Q`` reference times (same padding) -> ``BatchNorm1d`` -> ReLU ->
    dropout, ``num_layers`` times, on ``(N, d, Q)`` with ``N`` = pixels; the output is
    flattened per pixel to ``Q * filters`` features (the input of the MLP head). Neighbouring
    reference times share weights, which a flattened ``Q*d -> 256`` layer does not: on a few
    hundred pixels it learns phenology shapes (green-up, harvest) wherever they fall.

    Args:
        d_model: Input features per reference time ``d``.
        filters: Output channels of every convolution.
        kernel_size: Odd kernel size, in reference times.
        num_layers: Convolutions (>= 1).
        dropout: Dropout after each convolution.

    Raises:
        ValueError: If ``kernel_size`` is even or below 1, or ``num_layers`` < 1.
    """

    def __init__(self, d_model: int, filters: int, kernel_size: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0 or num_layers < 1:
            raise ValueError(
                f"model.net.conv_kernel must be odd and >= 1 and model.net.conv_layers >= 1; got "
                f"conv_kernel={kernel_size}, conv_layers={num_layers}."
            )
        layers: list[nn.Module] = []
        for i in range(num_layers):
            layers += [
                nn.Conv1d(d_model if i == 0 else filters, filters, kernel_size, padding=kernel_size // 2),
                nn.BatchNorm1d(filters),
                nn.ReLU(),
                nn.Dropout(dropout),
            ]
        self.layers = nn.Sequential(*layers)
        self.filters = filters

    def forward(self, x: Tensor, fmt: Format) -> Tensor:
        """Convolve over the reference times.

        Args:
            x: ``(B, Q, d, H, W)`` float (``(B, H, W, Q, d)`` for ``Format.CHANNELS_LAST``).
            fmt: Layout of ``x`` and of the output.

        Returns:
            ``(B, Q*F, H, W)`` (``(B, H, W, Q*F)`` channels-last), ``F`` = ``filters``,
            ordered reference time by reference time.
        """
        seq, size = pixel_sequences(x, fmt)
        out = self.layers(seq.transpose(1, 2))  # (B*H*W, F, Q)
        return to_pixel_layout(rearrange(out, "n f q -> n (q f)"), size, fmt)


class TemporalGRUHead(nn.Module):
    """A bidirectional GRU over the reference-time features of each pixel (after mTAND's classifier).

    Shukla & Marlin (ICLR 2021) classify with a GRU run over the representation at the
    reference times and an MLP on its final hidden state (their encoder's GRU runs in both
    directions). Here the GRU runs in both directions over the ``Q`` reference times of each
    pixel, and the final hidden states of the two directions, ``2 * hidden`` features per
    pixel, are the input of the MLP head.

    Args:
        d_model: Input features per reference time ``d``.
        hidden: Hidden width of each direction.
    """

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        if hidden < 1:
            raise ValueError(f"model.net.gru_hidden must be >= 1, got {hidden}.")
        self.gru = nn.GRU(d_model, hidden, batch_first=True, bidirectional=True)
        self.out_features = 2 * hidden

    def forward(self, x: Tensor, fmt: Format) -> Tensor:
        """Run the GRU over the reference times.

        Args:
            x: ``(B, Q, d, H, W)`` float (``(B, H, W, Q, d)`` for ``Format.CHANNELS_LAST``).
            fmt: Layout of ``x`` and of the output.

        Returns:
            ``(B, 2*hidden, H, W)`` (``(B, H, W, 2*hidden)`` channels-last): the forward
            direction's state after the last reference time and the backward direction's
            after the first.
        """
        seq, size = pixel_sequences(x, fmt)
        _, last = self.gru(seq)  # (2, B*H*W, hidden)
        return to_pixel_layout(rearrange(last, "two n k -> n (two k)"), size, fmt)


def _check_net_args(
    attention: str,
    head: str,
    kernel_width: float,
    in_channels: Mapping[str, int],
    num_classes: int,
    time_scale: float,
    input_hidden: int,
    fusion_hidden: int,
) -> None:
    """Raise a ``ValueError`` naming the config key on an invalid argument of :class:`MTANClassifier`."""
    if attention not in ATTENTIONS:
        raise ValueError(f"model.net.attention must be one of {list(ATTENTIONS)}, got {attention!r}.")
    if head not in HEADS:
        raise ValueError(f"model.net.head must be one of {list(HEADS)}, got {head!r}.")
    if attention != "learned" and not kernel_width > 0:
        raise ValueError(f"model.net.kernel_width must be > 0 reference steps, got {kernel_width}.")
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
    if input_hidden < 0 or fusion_hidden < 0:
        raise ValueError(
            f"model.net.input_hidden and model.net.fusion_hidden must be >= 0 (0 = one linear projection); "
            f"got input_hidden={input_hidden}, fusion_hidden={fusion_hidden}."
        )


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
        input_hidden: Hidden width of each input embedding (``C -> input_hidden -> d``);
            0 = one linear projection ``C -> d``.
        fusion_hidden: Hidden width of the fusion MLP; 0 = one linear projection.
        head_hidden: Hidden widths of the head.
        dropout: Dropout in the head.
        time_min_cycles: Lowest initial frequency of the time embedding, cycles per unit
            of ``tau`` (one year at ``time_scale=365``).
        time_max_cycles: Highest initial frequency (12: monthly detail; long series of
            100-300 dates may want more, short monthly composites fewer).
        attention_init: ``default`` or ``identity`` query/key projections (see
            :class:`~mtan_s1s2.models.layers.attention.MultiTimeAttention`).
        head_norm: Layer-normalise each pixel's flattened ``Q*d`` features (``Q*F`` after a
            conv head) before the MLP head
            (:class:`~mtan_s1s2.models.layers.norm.FeatureNorm`). Off by default; on
            small datasets it keeps the head's input at unit scale, so training leaves the
            "predict the majority class" start sooner.
        attention: ``learned`` (mTAN: scores from the learned time embedding), ``kernel``
            (no learned scores: each reference time is the Laplace-kernel-weighted mean of
            the pixel's valid observations, ``exp(-|tau - ref| / w)``, a fixed interpolation
            of the series onto the reference times) or ``learned_kernel`` (the learned scores
            plus the kernel's log-weight: local at the start, free to learn more).
        kernel_width: The kernel width ``w`` in reference steps (``ref_range`` span / ``Q``);
            used by ``kernel`` and ``learned_kernel``.
        head: ``flatten`` (the reference times flattened into ``Q*d`` features, then the MLP
            head), ``conv`` (:class:`TemporalConvHead` over the reference times first) or
            ``gru`` (:class:`TemporalGRUHead`: a bidirectional GRU over the reference times,
            its final states the MLP head's input, after mTAND's classifier).
        conv_filters: Channels ``F`` of the conv head.
        conv_kernel: Kernel size of the conv head, in reference times (odd).
        conv_layers: Convolutions of the conv head.
        gru_hidden: Hidden width of each direction of the GRU head.
        ref_values: Also give the head, at each reference time, every modality's series
            there and a flag, 1 where a valid observation lies within half a reference step:
            ``C_m + 1`` more features per modality beside the attention's ``d``. ``True`` or
            ``"linear"``: the valid observations linearly interpolated at the reference time
            (:func:`~mtan_s1s2.data.date_grid.interpolate_to_grid`, TempCNN's view of the
            series); ``"mean"``: the mean of the valid observations within half a reference
            step, interpolated where there are none
            (:func:`~mtan_s1s2.data.date_grid.window_mean_images_to_grid`); ``False``: none.
        intensity: Give each modality's output projection, per reference time and head, the
            log of the attention mass on the pixel's valid dates (how much valid data lies
            near that reference time: gaps, clouds, sparse orbits), which the normalised
            attention output discards (:class:`~mtan_s1s2.models.layers.attention.MultiTimeAttention`).
        spatial_context: Neighbourhood side ``k`` in pixels: the head also reads, beside each
            pixel's own features, their mean over the ``k x k`` pixels around it that hold data
            (:class:`~mtan_s1s2.models.layers.spatial.NeighbourhoodMean`), twice the features;
            ``1`` = per pixel (no spatial context). Only rasters (datacubes, GeoTIFF, PASTIS)
            have neighbours: on pixel tables (``H = W = 1``) the mean is the pixel itself.
            ``auto`` (resolved by ``train.py`` from the data): :data:`AUTO_SPATIAL_CONTEXT` on
            rasters, 1 on pixel tables.
        spatial_pool: How ``spatial_context`` pools the neighbourhood: ``mean`` (every
            neighbour holding data weighs the same), ``attention`` (weights learned from
            the pixel's and each neighbour's features,
            :class:`~mtan_s1s2.models.layers.spatial.NeighbourhoodAttention`) or
            ``similarity`` (weights from the cosine similarity of the two pixels' features
            with one learned temperature, a bilateral filter,
            :class:`~mtan_s1s2.models.layers.spatial.NeighbourhoodSimilarity`).

    Shapes:
        returns: logits ``(B, K, H, W)`` float.

    Raises:
        ValueError: On an unknown modality, backend, ``attention`` or ``head``, a kernel width
            that is not positive, a ``spatial_context`` that is not 1 or odd >= 3, or (in
            ``forward``) on inputs whose shapes disagree with the configuration.

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
        attention: str = "learned",
        kernel_width: float = 1.0,
        head: str = "flatten",
        conv_filters: int = 64,
        conv_kernel: int = 3,
        conv_layers: int = 2,
        intensity: bool = False,
        gru_hidden: int = 64,
        ref_values: bool | str = False,
        spatial_context: int | str = 1,
        spatial_pool: str = "mean",
    ) -> None:
        super().__init__()
        _check_net_args(
            attention, head, kernel_width, in_channels, num_classes, time_scale, input_hidden, fusion_hidden
        )
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
        self.attention = attention
        # kernel width in tau: kernel_width reference steps
        self.kernel_tau = float(kernel_width) * abs(end - start) / max(int(num_ref_times), 1)
        # the kernel attention reads the dates themselves: no time embedding to learn
        self.time_embedding = (
            TimeEmbedding(embed_time, time_min_cycles, time_max_cycles) if attention != "kernel" else None
        )
        self.encoders = nn.ModuleDict(
            {
                m: ModalityEncoder(
                    c,
                    d_model,
                    embed_time,
                    num_heads,
                    input_hidden,
                    mlp,
                    attention_init,
                    learned_attention=attention != "kernel",
                    intensity=intensity,
                )
                for m, c in self.in_channels.items()
            }
        )
        n_mod = len(self.modalities)
        self.fusion = mlp(n_mod * d_model + n_mod, (fusion_hidden,) if fusion_hidden else (), d_model)
        if ref_values not in REF_VALUES_MODES:
            raise ValueError(
                f"model.net.ref_values must be false, true (= linear), linear or mean; got {ref_values!r}."
            )
        self.ref_values = bool(ref_values)
        self.ref_values_mode = REF_VALUES_MODES[ref_values]
        # the head's features per reference time: the fused d, and with ref_values C_m + 1 per modality
        width = d_model + (sum(c + 1 for c in self.in_channels.values()) if self.ref_values else 0)
        self.ref_step_days = abs(end - start) * self.time_scale / max(int(num_ref_times), 1)
        self.conv_head = (
            TemporalConvHead(width, conv_filters, conv_kernel, conv_layers, dropout) if head == "conv" else None
        )
        self.gru_head = TemporalGRUHead(width, gru_hidden) if head == "gru" else None
        if self.gru_head is not None:
            head_in = self.gru_head.out_features
        else:
            head_in = num_ref_times * (conv_filters if head == "conv" else width)
        side = check_neighbourhood_side(spatial_context, "model.net.spatial_context")
        if spatial_pool not in SPATIAL_POOLS:
            raise ValueError(f"model.net.spatial_pool must be one of {list(SPATIAL_POOLS)}, got {spatial_pool!r}.")
        self.spatial: NeighbourhoodPool | None = None
        if side != 1:
            if spatial_pool == "attention":
                self.spatial = NeighbourhoodAttention(head_in, side, self.fmt)
            elif spatial_pool == "similarity":
                self.spatial = NeighbourhoodSimilarity(side, self.fmt)
            else:
                self.spatial = NeighbourhoodMean(side, self.fmt)
            head_in *= 2  # each pixel's features and their pooled neighbourhood
        self.head_norm = FeatureNorm(head_in, self.fmt) if head_norm else None
        self.head = mlp(head_in, tuple(head_hidden), num_classes, drop=dropout)

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
        if self.spatial is not None:
            self.spatial.fmt = cls.fmt

    def encode(self, inputs: Mapping[str, Any]) -> Tensor:
        """The encoder (:data:`ENCODER_MODULES`): the fused features at the reference times.

        Input embedding, time embedding, multi-time attention onto the reference times,
        output projection and fusion (blocks 1-6 of ``docs/model.md``); what
        self-supervised pretraining (:mod:`mtan_s1s2.models.reconstruction`) trains and
        ``model.pretrained`` loads.

        Returns:
            ``(B, Q, d, H, W)`` float for channels-first backends, ``(B, H, W, Q, d)`` for
            the channels-last one.
        """
        self.check_inputs(inputs)
        cl = self.fmt == Format.CHANNELS_LAST
        ref_tau = self.get_buffer("ref_times")
        ref_emb = ref_tau[:, None] if self.time_embedding is None else self.time_embedding(ref_tau)
        feats: list[Tensor] = []
        flags: list[Tensor] = []
        for m, encoder in self.encoders.items():
            x, doy, mask = inputs[m]["x"], inputs[m]["doy"], inputs[m]["mask"]
            x = torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))
            # A date valid at no pixel (padding) is never attended to; its doy may be NaN
            # and must not reach the time embedding, whose gradient would then be NaN.
            doy = padding_doy_zeroed(doy, mask)
            if cl:
                x = rearrange(x, "b t c h w -> b t h w c")
            tau = doy / self.time_scale
            time_emb = tau[..., None] if self.time_embedding is None else self.time_embedding(tau)
            prior = None if self.attention == "learned" else kernel_prior(ref_tau, tau, self.kernel_tau)
            z, available = encoder(x, mask, ref_emb, time_emb, prior)
            feats.append(z)
            flags.append(available)
        Q = ref_emb.shape[0]
        if cl:
            a = repeat(torch.stack(flags, dim=-1).to(feats[0].dtype), "b h w m -> b h w q m", q=Q)
            fused: Tensor = self.fusion(torch.cat([*feats, a], dim=-1))  # (B, H, W, Q, d)
            return fused
        a = repeat(torch.stack(flags, dim=1).to(feats[0].dtype), "b m h w -> b q m h w", q=Q)
        fused = self.fusion(torch.cat([*feats, a], dim=2))  # (B, Q, d, H, W)
        return fused

    def forward(self, inputs: Mapping[str, Any]) -> Tensor:
        """Per-pixel logits ``(B, K, H, W)`` for a batch (see the class docstring).

        Channels-first backends keep features ``(B, Q, d, H, W)`` between blocks; the
        channels-last backend converts each input once to ``(B, T, H, W, C)``, keeps
        ``(B, H, W, Q, d)`` between blocks (so the head's ``(B, H, W, Q*d)`` input is a
        view) and converts the logits once at the end.
        """
        fused = self.encode(inputs)
        if self.ref_values:
            dim = -1 if self.fmt == Format.CHANNELS_LAST else 2
            fused = torch.cat([fused, self.reference_values(inputs).to(fused.dtype)], dim=dim)
        return self.classify(fused, self.pixels_with_data(inputs) if self.spatial is not None else None)

    def pixels_with_data(self, inputs: Mapping[str, Any]) -> Tensor:
        """``(B, H, W)`` bool: True where a pixel has a valid observation in some modality."""
        return pixels_with_data(inputs, self.modalities)

    def reference_values(self, inputs: Mapping[str, Any]) -> Tensor:
        """Each modality's series at the reference times (``ref_values``).

        Per pixel and modality, the value at each reference time (``ref_values: linear``)
        lies on the line between the valid observations before and after it (held constant
        beyond the first and last one, 0 without any), or (``ref_values: mean``) is the mean
        of the valid observations within half a reference step of it, that line where there
        are none; followed by a flag: 1 where a valid observation lies within half a
        reference step. Masked values and the dates of padding are never read.

        Returns:
            ``(B, Q, sum(C_m + 1), H, W)`` float (``(B, H, W, Q, sum(C_m + 1))`` for the
            channels-last backend), modalities in ``in_channels`` order.
        """
        ref_days = self.get_buffer("ref_times") * self.time_scale
        series = window_mean_images_to_grid if self.ref_values_mode == "mean" else interpolate_images_to_grid
        parts: list[Tensor] = []
        for m in self.modalities:
            x, doy, mask = inputs[m]["x"], inputs[m]["doy"], inputs[m]["mask"]
            values, observed = series(x, padding_doy_zeroed(doy, mask), mask, ref_days, self.ref_step_days)
            parts.append(torch.cat([values, observed[:, :, None].to(values.dtype)], dim=2))
        out = torch.cat(parts, dim=2)  # (B, Q, sum(C_m + 1), H, W)
        if self.fmt == Format.CHANNELS_LAST:
            return rearrange(out, "b q c h w -> b h w q c")
        return out

    def classify(self, fused: Tensor, valid: Tensor | None = None) -> Tensor:
        """The head: per-pixel logits from the encoder's features (:meth:`encode`).

        Args:
            fused: ``(B, Q, D, H, W)`` float (``(B, H, W, Q, D)`` for the channels-last
                backend): :meth:`encode`'s output (``D = d``), or a convex mix of two of
                them; with ``ref_values``, followed by :meth:`reference_values`
                (``D = d + sum(C_m + 1)``), as :meth:`forward` gives it.
            valid: ``(B, H, W)`` bool, the pixels holding data (:meth:`pixels_with_data`):
                the only ones in the neighbourhood means of ``spatial_context``; None = every pixel.

        Returns:
            Logits ``(B, K, H, W)`` float.
        """
        cl = self.fmt == Format.CHANNELS_LAST
        temporal = self.conv_head if self.conv_head is not None else self.gru_head
        if temporal is not None:  # (B, Q*F or 2*gru_hidden, H, W), channels-last (B, H, W, ...)
            flat = temporal(fused, self.fmt)
        else:  # a view
            flat = rearrange(fused, "b h w q d -> b h w (q d)" if cl else "b q d h w -> b (q d) h w")
        if self.spatial is not None:
            flat = torch.cat([flat, self.spatial(flat, valid)], dim=-1 if cl else 1)
        logits: Tensor = self.head(flat if self.head_norm is None else self.head_norm(flat))
        return rearrange(logits, "b h w k -> b k h w") if cl else logits
