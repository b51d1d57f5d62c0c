"""Pointwise MLP blocks with switchable backends.

Every [MLP] block of the classifier (``shared/design/MODEL.md`` section 3) is a pointwise
(per pixel, per date) MLP. Its *backend* only changes how the matrix products are laid
out in memory, never the result:

* :class:`LinearMlp` (``mlp=linear``): rearranges the channels-first input to
  channels-last rows, ``"b t c h w -> (b t h w) c"``, applies ``nn.Linear`` layers and
  rearranges back. This is the pattern users wrote and timed.
* :class:`ConvMlp` (``mlp=conv``): keeps the input channels-first and applies
  ``nn.Conv2d(kernel_size=1)`` on ``(b t) c h w``.
* :class:`ChannelsLastMlp` (``mlp=channels_last``): ``nn.Linear`` on channels-last tensors
  ``(..., C)`` with no copy; the model keeps its features channels-last between blocks and
  converts layout once at its input and once at its output (``layout = "channels_last"``).
* :class:`AutoMlp` (``mlp=auto``): behaves as ``linear`` until the training module times
  every backend on the real batch at the start of fit and switches to the fastest
  (:mod:`mtan_s1s2.models.backend_selection`).

``linear`` and ``conv`` take and return channels-first tensors, ``(B, C, H, W)`` or
``(B, T, C, H, W)``, so a caller never cares which of them it holds (timm's
``ConvNeXtBlock(conv_mlp=...)`` pattern); the class attribute ``layout`` tells a model which
layout a backend wants between blocks. All backends share the constructor and submodule
names (``fc1, act1, drop1, fc2, ...``), so their state dicts have the same keys and
parameter counts; only the weight shapes differ (``Linear`` ``(out, in)`` vs ``Conv2d``
``(out, in, 1, 1)``), and :meth:`PointwiseMlp._load_from_state_dict` converts them, so a
checkpoint of any backend loads into any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
from einops import rearrange
from torch import Tensor, nn

Backend = Literal["linear", "conv", "channels_last", "auto"]
Layout = Literal["channels_first", "channels_last"]


class PointwiseMlp(nn.Module):
    """Base class: ``in -> hidden[0] -> ... -> hidden[-1] -> out``, ReLU and dropout between.

    Submodules are named ``fc{i}`` (``i`` from 1), ``act{i}`` and ``drop{i}`` after every
    layer but the last; ``final_act=True`` adds ``act{n}``/``drop{n}`` after the last one.

    Args:
        in_features: Input channels ``C_in``.
        hidden_features: Widths of the hidden layers (empty for a single projection).
        out_features: Output channels ``C_out``.
        drop: Dropout probability after each activation.
        final_act: Whether the last layer is followed by ReLU and dropout too.
        bias: Whether the layers have a bias.

    Raises:
        ValueError: If a width is not a positive integer or ``drop`` is outside [0, 1).
    """

    backend: ClassVar[str] = "base"
    layout: ClassVar[Layout] = "channels_first"

    def __init__(
        self,
        in_features: int,
        hidden_features: Sequence[int] = (),
        out_features: int | None = None,
        drop: float = 0.0,
        final_act: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        out_features = in_features if out_features is None else out_features
        widths = [int(in_features), *[int(w) for w in hidden_features], int(out_features)]
        if any(w <= 0 for w in widths):
            raise ValueError(f"MLP widths must be positive integers, got {widths}.")
        if not 0.0 <= drop < 1.0:
            raise ValueError(f"MLP dropout must be in [0, 1), got drop={drop}.")
        self.in_features = widths[0]
        self.out_features = widths[-1]
        self.init_kwargs = {
            "in_features": widths[0],
            "hidden_features": tuple(widths[1:-1]),
            "out_features": widths[-1],
            "drop": drop,
            "final_act": final_act,
            "bias": bias,
        }
        n = len(widths) - 1
        for i in range(n):
            self.add_module(f"fc{i + 1}", self._make_fc(widths[i], widths[i + 1], bias))
            if i < n - 1 or final_act:
                self.add_module(f"act{i + 1}", nn.ReLU())
                self.add_module(f"drop{i + 1}", nn.Dropout(drop) if drop > 0 else nn.Identity())

    def _make_fc(self, in_features: int, out_features: int, bias: bool) -> nn.Module:
        raise NotImplementedError  # pragma: no cover - abstract

    def _layers(self, x: Tensor) -> Tensor:
        for module in self.children():
            x = module(x)
        return x

    def _check(self, x: Tensor) -> None:
        if x.ndim not in (4, 5) or x.shape[-3] != self.in_features:
            raise ValueError(
                f"{type(self).__name__} expects a channels-first tensor (B, C, H, W) or "
                f"(B, T, C, H, W) with C={self.in_features}, got shape {tuple(x.shape)}."
            )

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object, **kwargs: object) -> None:
        # Portable checkpoints: reshape 1x1 weights of any backend to this block's own shape
        # ((out, in) <-> (out, in, 1, 1)). Any other mismatch is left to PyTorch, which
        # names the key and both shapes.
        for name, module in self.named_children():
            key = f"{prefix}{name}.weight"
            if name.startswith("fc") and key in state_dict:
                value, own = state_dict[key], module.weight
                if value.shape != own.shape and value.numel() == own.numel() and value.shape[:2] == own.shape[:2]:
                    state_dict[key] = value.reshape(own.shape)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"backend={self.backend}"


class LinearMlp(PointwiseMlp):
    """Pointwise MLP of ``nn.Linear`` layers on channels-last rows (``mlp=linear``).

    Shapes:
        x: ``(B, C_in, H, W)`` or ``(B, T, C_in, H, W)``, any float dtype.
        returns: the same shape with ``C_out`` channels, channels-first.
    """

    backend: ClassVar[str] = "linear"

    def _make_fc(self, in_features: int, out_features: int, bias: bool) -> nn.Module:
        return nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        if x.ndim == 5:
            B, T, C, H, W = x.shape
            y = self._layers(rearrange(x, "b t c h w -> (b t h w) c"))
            return rearrange(y, "(b t h w) c -> b t c h w", b=B, t=T, h=H, w=W)
        B, C, H, W = x.shape
        y = self._layers(rearrange(x, "b c h w -> (b h w) c"))
        return rearrange(y, "(b h w) c -> b c h w", b=B, h=H, w=W)


class ConvMlp(PointwiseMlp):
    """Pointwise MLP of 1x1 ``nn.Conv2d`` layers on channels-first maps (``mlp=conv``).

    Shapes:
        x: ``(B, C_in, H, W)`` or ``(B, T, C_in, H, W)``, any float dtype.
        returns: the same shape with ``C_out`` channels.
    """

    backend: ClassVar[str] = "conv"

    def _make_fc(self, in_features: int, out_features: int, bias: bool) -> nn.Module:
        return nn.Conv2d(in_features, out_features, kernel_size=1, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        if x.ndim == 5:
            B = x.shape[0]
            y = self._layers(rearrange(x, "b t c h w -> (b t) c h w"))
            return rearrange(y, "(b t) c h w -> b t c h w", b=B)
        return self._layers(x)


class RowLinear(nn.Linear):
    """``nn.Linear`` on 2-D rows ``(N, C_in)`` whose weight gradient is ``x^T @ grad``.

    Same parameters, state dict and result as ``nn.Linear``. The forward is
    ``addmm(bias, x, weight.t().contiguous())``: with a contiguous ``(C_in, C_out)``
    operand, autograd computes the weight gradient as ``x^T @ grad`` and transposes the
    small result, instead of ``grad^T @ x`` (what ``nn.Linear`` does, to match the
    weight's row-major layout). For narrow inputs (``C_in`` = 3 or 10: S1 and S2 bands)
    and many rows, CPU BLAS runs the latter far slower: on a 2-core CPU the layer's
    forward+backward is 2.8-5x faster this way for ``C_in`` = 3 or 10, the same for
    ``C_in`` >= 32 (``python scripts/bench_weight_grad.py``).

    Shapes:
        x: ``(N, C_in)`` float.
        returns: ``(N, C_out)``.
    """

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight.t().contiguous()
        if self.bias is None:
            return x.mm(weight)
        return torch.addmm(self.bias, x, weight)


class ChannelsLastMlp(PointwiseMlp):
    """Pointwise MLP of ``nn.Linear`` layers on channels-last tensors (``mlp=channels_last``).

    No layout change inside the block: the model keeps features channels-last between
    blocks, so a stack of blocks makes no per-block copies.

    Shapes:
        x: ``(..., C_in)``, any float dtype, e.g. ``(B, T, H, W, C_in)``.
        returns: ``(..., C_out)``.
    """

    backend: ClassVar[str] = "channels_last"
    layout: ClassVar[Layout] = "channels_last"

    def _make_fc(self, in_features: int, out_features: int, bias: bool) -> nn.Module:
        return RowLinear(in_features, out_features, bias=bias)

    def _check(self, x: Tensor) -> None:
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__} expects a channels-last tensor (..., C) with "
                f"C={self.in_features}, got shape {tuple(x.shape)}."
            )

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        y = self._layers(x.reshape(-1, x.shape[-1]))  # a view for contiguous inputs
        return y.view(*x.shape[:-1], y.shape[-1])


class AutoMlp(LinearMlp):
    """Placeholder for ``mlp=auto``: a ``linear`` block until the fastest backend is chosen.

    :class:`~mtan_s1s2.lit_module.SITSClassifierModule` times every concrete backend at
    the start of fit and calls :meth:`MTANClassifier.set_backend`; used outside a fit, the
    model simply stays ``linear``.
    """

    backend: ClassVar[str] = "auto"


MLP_BACKENDS: dict[str, type[PointwiseMlp]] = {
    "linear": LinearMlp,
    "conv": ConvMlp,
    "channels_last": ChannelsLastMlp,
}
"""Backend name -> MLP class; the ``mlp`` config group selects one of these."""


def get_mlp_backend(name: str) -> type[PointwiseMlp]:
    """Return the MLP class of a backend name (``"auto"`` gives :class:`AutoMlp`).

    Raises:
        ValueError: If ``name`` is not a known backend; the message lists the choices.
    """
    if name == "auto":
        return AutoMlp
    try:
        return MLP_BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"Unknown MLP backend {name!r}; choose one of {sorted([*MLP_BACKENDS, 'auto'])} "
            "(config group `mlp`, e.g. `python train.py mlp=conv`)."
        ) from None


def convert_mlp_state_dict(state_dict: dict[str, Tensor], backend: str) -> dict[str, Tensor]:
    """Reshape the 1x1 layer weights of a state dict to another backend's layout.

    ``Linear`` weights ``(out, in)`` become ``Conv2d`` weights ``(out, in, 1, 1)`` and vice
    versa; every other tensor is returned unchanged. Only 2-D and ``(o, i, 1, 1)`` tensors
    whose key ends in ``.weight`` under an ``fc{i}`` module are touched.

    Args:
        state_dict: A model (or block) state dict of any backend.
        backend: Target backend name (``"linear"``, ``"conv"``, ``"channels_last"``).

    Returns:
        A new state dict whose MLP weights have the target backend's shapes.
    """
    target = get_mlp_backend(backend)
    out: dict[str, Tensor] = {}
    for key, value in state_dict.items():
        parts = key.split(".")
        is_fc_weight = len(parts) >= 2 and parts[-1] == "weight" and parts[-2].startswith("fc")
        if is_fc_weight and issubclass(target, ConvMlp) and value.ndim == 2:
            value = value[:, :, None, None]
        elif is_fc_weight and not issubclass(target, ConvMlp) and value.ndim == 4 and value.shape[2:] == (1, 1):
            value = value[:, :, 0, 0]
        out[key] = value
    return out


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters of a module."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = [
    "AutoMlp",
    "Backend",
    "ChannelsLastMlp",
    "ConvMlp",
    "Layout",
    "LinearMlp",
    "MLP_BACKENDS",
    "PointwiseMlp",
    "RowLinear",
    "convert_mlp_state_dict",
    "count_parameters",
    "get_mlp_backend",
]
