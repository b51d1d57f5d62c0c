"""The benchmarked workloads: one 1x1 projection, the model's MLP blocks, a training step.

Each workload is a :class:`Workload` whose ``make(pass_, precision, compile)`` builds the
callable to time (inputs and modules allocated once, outside the timed call):

* ``projection``: the layer-level comparison users ran, one 1x1 projection ``C -> C`` on
  an ``(N, C, H, W)`` tensor in three layouts: ``linear`` (``nn.Linear`` after
  ``rearrange("n c h w -> (n h w) c")`` and back), ``conv`` (``nn.Conv2d(1x1)`` on
  NCHW) and ``channels_last`` (``nn.Linear`` on an ``(N, H, W, C)`` tensor).
* ``blocks``: every [MLP] block of an :class:`~mtan_s1s2.models.mtan.MTANClassifier` built
  with the backend, on the inputs it really receives (captured with forward hooks on one
  forward pass of a synthetic batch, under the same autocast precision, so shapes, layouts
  and dtypes are the real ones). Layout conversions outside the blocks (the
  channels-last backend's once-per-forward rearranges) are not in these timings; they are
  in ``train_step``.
* ``train_step``: the whole model on one synthetic batch. ``forward`` is forward + loss
  under ``torch.no_grad`` (eval mode); ``forward_backward`` is a full training step:
  forward + loss + backward + optimiser step (with a ``GradScaler`` for fp16).
* ``predict``: inference of the whole model (eval mode, ``torch.inference_mode``) on one
  scene tile with a realistic number of dates per modality (``bench.predict``: a year of
  S2 every 5 days, S1 every 6 days per orbit); ``forward`` only. Rows add ``pixels_per_s``
  and the hours it implies for a 10980 x 10980 px Sentinel-2 tile (``s2_tile_hours``).

``forward`` always runs under ``torch.no_grad()``; ``forward_backward`` backpropagates a
fixed random output gradient (blocks, projection) or the loss (train step), with inputs
requiring grad where they do in the real model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

import torch
from einops import rearrange
from torch import Tensor, nn

from mtan_s1s2.models.compiling import compile_or_eager
from mtan_s1s2.models.layers.mlp import PointwiseMlp
from mtan_s1s2.models.losses import masked_cross_entropy
from mtan_s1s2.utils.precision import autocast

PASSES: tuple[str, ...] = ("forward", "forward_backward")
SUITES: tuple[str, ...] = ("projection", "blocks", "train_step", "predict")
FORWARD_ONLY_SUITES: tuple[str, ...] = ("predict",)
"""Suites timed in the ``forward`` pass only (inference)."""
S2_TILE_PIXELS = 10980 * 10980
"""Pixels of a Sentinel-2 MGRS tile at 10 m."""


def compile_for_bench(
    module: nn.Module, enabled: bool, probe: Callable[[nn.Module], Any] | None = None
) -> tuple[nn.Module, str]:
    """:func:`~mtan_s1s2.models.compiling.compile_or_eager` with Dynamo's caches reset first.

    Every workload compiles the same ``forward`` code for another module (backend,
    precision, pass), which would otherwise pile up guards and hit the recompile limit.
    """
    return compile_or_eager(module, enabled, probe=probe, reset=True)


@dataclass
class Workload:
    """One thing to time for one backend.

    Attributes:
        suite: ``"projection"``, ``"blocks"`` or ``"train_step"``.
        case: What inside the suite, e.g. ``"1x1 projection"`` or ``"encoders.s2.embed"``.
        backend: Backend (or projection layout) name.
        shape: Input shape as ``"AxBxC"`` in the backend's own layout.
        make: ``(pass_, precision, compile) -> (fn, compile_status)``.
        io_bytes: Bytes a forward pass must read and write at least once (input, output,
            weights), for the memory bandwidth of memory-bound workloads; None if not
            estimated.
    """

    suite: str
    case: str
    backend: str
    shape: str
    make: Callable[[str, str, bool], tuple[Callable[[], Any], str]]
    io_bytes: int | None = None

    def bytes_moved(self, pass_: str) -> int | None:
        """Bytes of one call: ``io_bytes`` forward, three times that forward+backward.

        The backward reads the output gradient and writes the input and weight gradients.
        """
        if self.io_bytes is None:
            return None
        return self.io_bytes * (1 if pass_ == "forward" else 3)


def shape_str(shape: Sequence[int]) -> str:
    return "x".join(str(int(s)) for s in shape)


# ----------------------------------------------------------------------------------------
# 1. The user's single 1x1 projection
# ----------------------------------------------------------------------------------------


class RearrangeLinear(nn.Module):
    """``nn.Linear`` after ``rearrange("n c h w -> (n h w) c")`` and back (users' pattern).

    Shapes:
        x: ``(N, C, H, W)``; returns ``(N, C_out, H, W)`` (a permuted view).
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, channels)

    def forward(self, x: Tensor) -> Tensor:
        N, C, H, W = x.shape
        y: Tensor = self.fc(rearrange(x, "n c h w -> (n h w) c"))
        return rearrange(y, "(n h w) c -> n c h w", n=N, h=H, w=W)


class Conv1x1(nn.Module):
    """``nn.Conv2d(kernel_size=1)`` on ``(N, C, H, W)``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Conv2d(channels, channels, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        return cast(Tensor, self.fc(x))


class ChannelsLastLinear(nn.Module):
    """``nn.Linear`` on a channels-last ``(N, H, W, C)`` tensor (no copy)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, channels)

    def forward(self, x: Tensor) -> Tensor:
        return cast(Tensor, self.fc(x))


PROJECTION_VARIANTS: dict[str, tuple[type[nn.Module], str]] = {
    "linear": (RearrangeLinear, "n c h w"),
    "conv": (Conv1x1, "n c h w"),
    "channels_last": (ChannelsLastLinear, "n h w c"),
}
"""Projection layout name -> (module, input layout)."""


def _backward_fn(
    module: Callable[[Any], Tensor],
    inputs: Any,
    params: Sequence[nn.Parameter],
    grad_inputs: Sequence[Tensor],
    ctx: Callable[[], AbstractContextManager[Any]],
) -> Callable[[], None]:
    """A call doing forward + backward of ``module(inputs)`` against a fixed output grad."""
    grad_out: list[Tensor] = []

    def fn() -> None:
        for t in (*params, *grad_inputs):
            t.grad = None
        with ctx():
            y = module(inputs)
        if not grad_out:
            grad_out.append(torch.randn_like(y))
        y.backward(grad_out[0])  # type: ignore[no-untyped-call]

    return fn


def _forward_fn(
    module: Callable[[Any], Tensor], inputs: Any, ctx: Callable[[], AbstractContextManager[Any]]
) -> Callable[[], None]:
    def fn() -> None:
        with torch.no_grad(), ctx():
            module(inputs)

    return fn


def projection_workloads(
    shape: Sequence[int], device: torch.device, variants: Sequence[str] | None = None, seed: int = 0
) -> list[Workload]:
    """The user's 1x1 projection ``C -> C`` on an ``(N, C, H, W)`` float32 tensor.

    Args:
        shape: ``(N, C, H, W)``.
        device: Where to run.
        variants: Layouts among :data:`PROJECTION_VARIANTS` (default: all three).
        seed: Seed of the weights and input.

    Raises:
        ValueError: On a bad shape or unknown variant.
    """
    if len(shape) != 4 or any(int(s) <= 0 for s in shape):
        raise ValueError(f"bench.projection.shape must be 4 positive ints (N, C, H, W), got {list(shape)}.")
    variants = list(PROJECTION_VARIANTS) if variants is None else list(variants)
    bad = [v for v in variants if v not in PROJECTION_VARIANTS]
    if bad:
        raise ValueError(f"Unknown projection variant(s) {bad}; choose among {list(PROJECTION_VARIANTS)}.")
    N, C, H, W = (int(s) for s in shape)
    out: list[Workload] = []
    for name in variants:
        cls, layout = PROJECTION_VARIANTS[name]
        in_shape = (N, C, H, W) if layout == "n c h w" else (N, H, W, C)

        def make(
            pass_: str, precision: str, compile_: bool, cls: type[nn.Module] = cls, in_shape: tuple[int, ...] = in_shape
        ) -> tuple[Callable[[], Any], str]:
            g = torch.Generator().manual_seed(seed)
            module = cls(C).to(device)
            x = torch.randn(in_shape, generator=g).to(device)
            ctx = functools.partial(autocast, precision, device)
            if pass_ == "forward":
                run, status = compile_for_bench(module, compile_, probe=lambda m: _forward_fn(m, x, ctx)())
                return _forward_fn(run, x, ctx), status
            x.requires_grad_(True)
            run, status = compile_for_bench(
                module, compile_, probe=lambda m: _backward_fn(m, x, list(module.parameters()), [x], ctx)()
            )
            return _backward_fn(run, x, list(module.parameters()), [x], ctx), status

        io = 4 * (2 * N * C * H * W + C * C + C)  # fp32 input, output, weight, bias
        out.append(Workload("projection", f"1x1 projection {C}->{C}", name, shape_str(in_shape), make, io))
    return out


# ----------------------------------------------------------------------------------------
# 2. The model's own MLP blocks
# ----------------------------------------------------------------------------------------


def mlp_blocks(net: nn.Module) -> dict[str, nn.Module]:
    """The outermost [MLP] blocks of a model (``PointwiseMlp`` instances), by module name."""
    blocks: dict[str, nn.Module] = {}
    for name, module in net.named_modules():
        if isinstance(module, PointwiseMlp) and not any(name.startswith(b + ".") for b in blocks):
            blocks[name] = module
    if not blocks:
        raise ValueError(f"{type(net).__name__} has no PointwiseMlp blocks to benchmark.")
    return blocks


def capture_block_inputs(
    net: nn.Module, inputs: Mapping[str, Any], device: torch.device, precision: str
) -> dict[str, tuple[Tensor, bool]]:
    """Run one forward pass and keep each [MLP] block's input as it really is.

    Returns:
        Block name -> (detached copy of its input, whether that input required grad).
    """
    captured: dict[str, tuple[Tensor, bool]] = {}
    handles = []
    for name, block in mlp_blocks(net).items():

        def hook(module: nn.Module, args: tuple[Any, ...], output: Any, name: str = name) -> None:
            x = args[0]
            captured[name] = (x.detach().clone(), bool(x.requires_grad))

        handles.append(block.register_forward_hook(hook))
    try:
        with autocast(precision, device):
            net(inputs)
    finally:
        for h in handles:
            h.remove()
    return captured


def block_workloads(
    make_net: Callable[[], nn.Module], inputs: Mapping[str, Any], device: torch.device, backend: str
) -> list[Workload]:
    """Each [MLP] block of ``make_net()`` on its real inputs (captured per precision).

    Args:
        make_net: Builds the model of ``backend`` (on ``device``).
        inputs: One batch's model inputs (``{modality: {"x", "doy", "mask"}}``) on ``device``.
        device: Where to run.
        backend: Backend name (for the rows).
    """
    net = make_net()
    blocks = mlp_blocks(net)
    shapes = {n: shape_str(x.shape) for n, (x, _) in capture_block_inputs(net, inputs, device, "fp32").items()}
    cache: dict[str, dict[str, tuple[Tensor, bool]]] = {}
    out: list[Workload] = []
    for name, block in blocks.items():

        def make(
            pass_: str, precision: str, compile_: bool, name: str = name, block: nn.Module = block
        ) -> tuple[Callable[[], Any], str]:
            if precision not in cache:
                net.train()
                cache[precision] = capture_block_inputs(net, inputs, device, precision)
            x, needs_grad = cache[precision][name]
            ctx = functools.partial(autocast, precision, device)
            if pass_ == "forward":
                block.eval()
                run, status = compile_for_bench(block, compile_, probe=lambda m: _forward_fn(m, x, ctx)())
                return _forward_fn(run, x, ctx), status
            block.train()
            x = x.clone().requires_grad_(needs_grad)
            grad_inputs = [x] if needs_grad else []
            params = list(block.parameters())
            run, status = compile_for_bench(
                block, compile_, probe=lambda m: _backward_fn(m, x, params, grad_inputs, ctx)()
            )
            return _backward_fn(run, x, params, grad_inputs, ctx), status

        out.append(Workload("blocks", name, backend, shapes[name], make))
    return out


# ----------------------------------------------------------------------------------------
# 3. One training step of the whole model
# ----------------------------------------------------------------------------------------


def train_step_workload(
    make_net: Callable[[], nn.Module],
    make_optimizer: Callable[[Any], torch.optim.Optimizer],
    batch: Mapping[str, Any],
    modalities: Sequence[str],
    device: torch.device,
    backend: str,
    ignore_index: int = 0,
) -> Workload:
    """Forward + loss (+ backward + optimiser step) of the whole model on one batch.

    Args:
        make_net: Builds the model of ``backend`` (on ``device``).
        make_optimizer: ``params -> optimizer`` (e.g. the configured AdamW partial).
        batch: A collated batch (:mod:`mtan_s1s2.data.batch`) on ``device``.
        modalities: The model's modalities.
        device: Where to run.
        backend: Backend name (for the rows).
        ignore_index: Label excluded from the loss.
    """
    inputs = {m: batch[m] for m in modalities}
    target = batch["label"]
    shape = ",".join(f"{m}:{shape_str(batch[m]['x'].shape)}" for m in modalities)

    def make(pass_: str, precision: str, compile_: bool) -> tuple[Callable[[], Any], str]:
        net = make_net()
        ctx = functools.partial(autocast, precision, device)

        if pass_ == "forward":
            net.eval()

            def forward(model: nn.Module) -> None:
                with torch.no_grad(), ctx():
                    masked_cross_entropy(model(inputs), target, ignore_index)

            run, status = compile_for_bench(net, compile_, probe=forward)
            return (lambda: forward(run)), status

        net.train()
        opt = make_optimizer(net.parameters())
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

        def step(model: nn.Module) -> None:
            opt.zero_grad(set_to_none=True)
            with ctx():
                loss = masked_cross_entropy(model(inputs), target, ignore_index)
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            scaler.step(opt)
            scaler.update()

        run, status = compile_for_bench(net, compile_, probe=step)
        return (lambda: step(run)), status

    return Workload("train_step", "whole model", backend, shape, make)


def predict_workload(
    make_net: Callable[[], nn.Module],
    in_channels: Mapping[str, int],
    dates: Mapping[str, int],
    tile: int,
    device: torch.device,
    backend: str,
    p_valid: float = 0.7,
    seed: int = 0,
) -> Workload:
    """Inference of the whole model on one ``tile`` x ``tile`` px tile of a scene.

    Args:
        make_net: Builds the model of ``backend`` (on ``device``).
        in_channels: Bands per modality.
        dates: Dates per modality (e.g. ``{"s2": 73, "s1_asc": 61, "s1_desc": 61}``).
        tile: Tile side, pixels.
        device: Where to run.
        backend: Backend name (for the rows).
        p_valid: Share of valid observations (the rest masked, as clouds are).
        seed: Seed of the random inputs.
    """
    g = torch.Generator().manual_seed(seed)
    inputs: dict[str, Any] = {}
    for m, c in in_channels.items():
        t = int(dates.get(m, 0))
        if t < 1:
            raise ValueError(f"bench.predict.dates has no date count for modality {m!r}; got {dict(dates)}.")
        inputs[m] = {
            "x": torch.randn(1, t, c, tile, tile, generator=g).to(device),
            "doy": torch.sort(torch.rand(1, t, generator=g) * 365.0, dim=1).values.to(device),
            "mask": (torch.rand(1, t, tile, tile, generator=g) < p_valid).to(device),
        }
    shape = ",".join(f"{m}:{shape_str(v['x'].shape)}" for m, v in inputs.items())

    def make(pass_: str, precision: str, compile_: bool) -> tuple[Callable[[], Any], str]:
        net = make_net().eval()
        ctx = functools.partial(autocast, precision, device)

        def forward(model: nn.Module) -> None:
            with torch.inference_mode(), ctx():
                model(inputs)

        run, status = compile_for_bench(net, compile_, probe=forward)
        return (lambda: forward(run)), status

    case = f"scene tile {tile}x{tile} px, dates " + " ".join(f"{m}:{int(dates[m])}" for m in in_channels)
    return Workload("predict", case, backend, shape, make)


__all__ = [
    "FORWARD_ONLY_SUITES",
    "PASSES",
    "PROJECTION_VARIANTS",
    "S2_TILE_PIXELS",
    "SUITES",
    "Workload",
    "block_workloads",
    "capture_block_inputs",
    "mlp_blocks",
    "predict_workload",
    "projection_workloads",
    "train_step_workload",
]
