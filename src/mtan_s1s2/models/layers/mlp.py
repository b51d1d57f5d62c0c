"""Pointwise MLP blocks with switchable backends, and the registry of backend names.

Every [MLP] block of the classifier (``docs/model.md``, "MLP backends") is a pointwise
(per pixel, per date) MLP. Its *backend* only changes how the matrix products are laid
out in memory, never the result:

* :class:`LinearMlp` (``mlp=linear``): rearranges the channels-first input to
  channels-last rows, ``"b t c h w -> (b t h w) c"``, applies ``nn.Linear`` layers and
  rearranges back. This is the pattern users wrote and timed.
* :class:`ConvMlp` (``mlp=conv``): keeps the input channels-first and applies
  ``nn.Conv2d(kernel_size=1)`` on ``(b t) c h w`` (on NHWC memory under CPU bf16 autocast,
  where oneDNN's bf16 kernels want it).
* :class:`ChannelsLastMlp` (``mlp=channels_last``): ``nn.Linear`` on channels-last tensors
  ``(..., C)`` with no copy; the model keeps its features channels-last between blocks and
  converts layout once at its input and once at its output (``fmt = Format.CHANNELS_LAST``).
* :class:`AutoMlp` (``mlp=auto``): behaves as ``linear`` until the
  :class:`~mtan_s1s2.callbacks.auto_backend.AutoBackend` callback times every backend on
  the real batch at the start of fit and switches the model to the fastest.

``linear`` and ``conv`` take and return channels-first tensors, ``(B, C, H, W)`` or
``(B, T, C, H, W)``, so a caller never cares which of them it holds (timm's
``ConvNeXtBlock(conv_mlp=...)`` pattern); the class attribute ``fmt`` tells a model which
:class:`~mtan_s1s2.models.layers.format.Format` a backend wants between blocks. All
backends share the constructor and submodule names (``fc1, act1, drop1, fc2, ...``), so
their state dicts have the same keys and parameter counts; only the weight shapes differ
(``Linear`` ``(out, in)`` vs ``Conv2d`` ``(out, in, 1, 1)``), and
:meth:`PointwiseMlp._load_from_state_dict` converts them, so a checkpoint of any backend
loads into any other.

Backend names are resolved in one place: :data:`MLP_BACKENDS` (the concrete backends, in
the order tables list them), :data:`AUTO_BACKEND`, :func:`mlp_class` and
:func:`backend_name` (from a name, a class, a ``functools.partial`` or a Hydra config).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, cast

import torch
from einops import rearrange
from torch import Tensor, nn

from mtan_s1s2.models.layers.format import Format


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
    fmt: ClassVar[Format] = Format.CHANNELS_FIRST

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
        self.init_kwargs: dict[str, Any] = {
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

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: object, **kwargs: object) -> None:
        # Portable checkpoints: reshape 1x1 weights of any backend to this block's own shape
        # ((out, in) <-> (out, in, 1, 1)). Any other mismatch is left to PyTorch, which
        # names the key and both shapes.
        for name, module in self.named_children():
            key = f"{prefix}{name}.weight"
            if name.startswith("fc") and key in state_dict:
                value, own = state_dict[key], module.get_parameter("weight")
                if value.shape != own.shape and value.numel() == own.numel() and value.shape[:2] == own.shape[:2]:
                    state_dict[key] = value.reshape(own.shape)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        """Show the backend in ``print(model)``."""
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
        """Apply the block (see the class docstring for shapes)."""
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

    Under CPU bf16 autocast the convolutions run on NHWC memory
    (``torch.channels_last``): same shapes and values, other strides.

    Shapes:
        x: ``(B, C_in, H, W)`` or ``(B, T, C_in, H, W)``, any float dtype.
        returns: the same shape with ``C_out`` channels.
    """

    backend: ClassVar[str] = "conv"

    def _make_fc(self, in_features: int, out_features: int, bias: bool) -> nn.Module:
        return nn.Conv2d(in_features, out_features, kernel_size=1, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block (see the class docstring for shapes)."""
        self._check(x)
        if x.ndim == 5:
            B = x.shape[0]
            y = self._convs(rearrange(x, "b t c h w -> (b t) c h w"))
            return rearrange(y, "(b t) c h w -> b t c h w", b=B)
        return self._convs(x)

    def _convs(self, x: Tensor) -> Tensor:
        cpu_bf16 = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        if cpu_bf16 and x.device.type == "cpu":
            # oneDNN's bf16 1x1 convolutions (AVX512-BF16 / AMX) run 2-2.5x faster on NHWC
            # memory than on NCHW (docs/results.md, "mlp=conv in bf16 on NHWC memory"); the
            # result keeps the channels-first shape, only its strides change, and a following
            # ConvMlp finds its input already NHWC.
            x = x.contiguous(memory_format=torch.channels_last)
        return self._layers(x)


class RowLinear(nn.Linear):
    """``nn.Linear`` on 2-D rows ``(N, C_in)`` whose weight gradient is ``x^T @ grad``.

    Same parameters, state dict and result as ``nn.Linear``. The forward is
    ``addmm(bias, x, weight.t().contiguous())``: with a contiguous ``(C_in, C_out)``
    operand, autograd computes the weight gradient as ``x^T @ grad`` and transposes the
    small result, instead of ``grad^T @ x`` (what ``nn.Linear`` does, to match the
    weight's row-major layout). For narrow inputs (``C_in`` = 3 or 10: S1 and S2 bands)
    and many rows, CPU BLAS runs the latter far slower
    (``python scripts/bench_weight_grad.py`` measures both).

    Shapes:
        x: ``(N, C_in)`` float.
        returns: ``(N, C_out)``.
    """

    def forward(self, x: Tensor) -> Tensor:
        """``x @ weight.T + bias`` with the weight gradient computed as ``x^T @ grad``."""
        weight = self.weight.t().contiguous()
        bias = cast("Tensor | None", self.bias)  # the stubs say Tensor; None with bias=False
        if bias is None:
            return x.mm(weight)
        return torch.addmm(bias, x, weight)


class ChannelsLastMlp(PointwiseMlp):
    """Pointwise MLP of ``nn.Linear`` layers on channels-last tensors (``mlp=channels_last``).

    No layout change inside the block: the model keeps features channels-last between
    blocks, so a stack of blocks makes no per-block copies.

    Shapes:
        x: ``(..., C_in)``, any float dtype, e.g. ``(B, T, H, W, C_in)``.
        returns: ``(..., C_out)``.
    """

    backend: ClassVar[str] = "channels_last"
    fmt: ClassVar[Format] = Format.CHANNELS_LAST

    def _make_fc(self, in_features: int, out_features: int, bias: bool) -> nn.Module:
        return RowLinear(in_features, out_features, bias=bias)

    def _check(self, x: Tensor) -> None:
        if x.ndim < 2 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__} expects a channels-last tensor (..., C) with "
                f"C={self.in_features}, got shape {tuple(x.shape)}."
            )

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block (see the class docstring for shapes)."""
        self._check(x)
        y = self._layers(x.reshape(-1, x.shape[-1]))  # a view for contiguous inputs
        return y.view(*x.shape[:-1], y.shape[-1])


class AutoMlp(LinearMlp):
    """Placeholder for ``mlp=auto``: a ``linear`` block until the fastest backend is chosen.

    The :class:`~mtan_s1s2.callbacks.auto_backend.AutoBackend` callback (added by the
    ``mlp=auto`` config) times every concrete backend at the start of fit and calls
    :meth:`~mtan_s1s2.models.mtan.MTANClassifier.set_backend`; used without it, the model
    stays ``linear``.
    """

    backend: ClassVar[str] = "auto"


MLP_BACKENDS: dict[str, type[PointwiseMlp]] = {cls.backend: cls for cls in (LinearMlp, ConvMlp, ChannelsLastMlp)}
"""Concrete backend name -> MLP class, in the order tables list them."""

AUTO_BACKEND = AutoMlp.backend
"""``mlp=auto``: trains with the fastest of :data:`MLP_BACKENDS`."""

REFERENCE_BACKEND = LinearMlp.backend
"""Speed-ups are given relative to this backend (the pattern users started from)."""

BACKEND_CHOICES: tuple[str, ...] = (*MLP_BACKENDS, AUTO_BACKEND)
"""Every option of the ``mlp`` config group, in table order."""

MlpFactory = Callable[..., PointwiseMlp]
"""An MLP class or a partial of one (what the ``mlp`` config group instantiates)."""


def mlp_class(mlp: str | MlpFactory | Mapping[str, Any]) -> type[PointwiseMlp]:
    """The MLP class of a backend, however it is given.

    Args:
        mlp: A backend name (``"conv"``, ``"auto"``, ...), an MLP class, a
            ``functools.partial`` of one (what ``mlp=...`` instantiates), or a Hydra config
            with ``_target_`` (e.g. a run's ``cfg.mlp``).

    Returns:
        The :class:`PointwiseMlp` subclass.

    Raises:
        ValueError: If ``mlp`` names or points to no known backend; the message lists the
            choices.
    """
    choices = f"choose one of {list(BACKEND_CHOICES)} (config group `mlp`, e.g. `python train.py mlp=conv`)"
    if isinstance(mlp, Mapping):
        from hydra.utils import get_class

        target = mlp.get("_target_")
        try:
            cls: Any = get_class(str(target))
        except Exception:
            raise ValueError(f"mlp config _target_={target!r} is not an MLP class; {choices}.") from None
    elif isinstance(mlp, str):
        by_name = {**MLP_BACKENDS, AUTO_BACKEND: AutoMlp}
        if mlp not in by_name:
            raise ValueError(f"Unknown MLP backend {mlp!r}; {choices}.")
        cls = by_name[mlp]
    else:
        cls = mlp.func if isinstance(mlp, functools.partial) else mlp
    if not (isinstance(cls, type) and issubclass(cls, PointwiseMlp) and cls.backend in BACKEND_CHOICES):
        raise ValueError(f"{mlp!r} is not an MLP backend; {choices}.")
    return cls


def backend_name(mlp: str | MlpFactory | Mapping[str, Any]) -> str:
    """The backend name (``"linear"``, ``"channels_last"``, ``"auto"``, ...) of :func:`mlp_class`'s argument.

    Raises:
        ValueError: As :func:`mlp_class`.
    """
    return mlp_class(mlp).backend


__all__ = [
    "AUTO_BACKEND",
    "BACKEND_CHOICES",
    "MLP_BACKENDS",
    "REFERENCE_BACKEND",
    "AutoMlp",
    "ChannelsLastMlp",
    "ConvMlp",
    "LinearMlp",
    "MlpFactory",
    "PointwiseMlp",
    "RowLinear",
    "backend_name",
    "mlp_class",
]
