"""torch.compile of the classifier: date buckets, every graph counted and timed, every backend as eager (fp32, bf16)."""

from __future__ import annotations

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.bench.compile_parity import PARITY_RTOL, compiled_step_parity
from mtan_s1s2.models.compiling import (
    COMPILE_COST_S,
    COMPILE_COST_STEPS,
    COMPILE_MAX_GAIN,
    CompiledNetwork,
    apply_compile_measurement,
    compile_pays_off,
    compile_seconds,
    compile_worth_measuring,
    compiled_inputs,
    graphs_compiled,
)
from mtan_s1s2.models.layers.mlp import MLP_BACKENDS
from mtan_s1s2.models.mtan import MTANClassifier
from mtan_s1s2.utils.precision import native_bf16


def _inputs(batch: dict) -> dict:
    return {m: batch[m] for m in CHANNELS}


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("backend", list(MLP_BACKENDS))
def test_compiled_equals_eager_without_graph_breaks_or_recompiles(backend: str, precision: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, mlp=backend, **small_net_kwargs()).eval()
    compiled = torch.compile(net, fullgraph=True)  # fullgraph: a graph break raises
    ctx = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    tol = 1e-4 if precision == "fp32" else 3e-2  # bf16 keeps ~3 significant digits
    batches = [  # other batch sizes and date counts within the same multiples of 8 (16, 8, 8)
        random_batch(T={"s2": 9, "s1_asc": 5, "s1_desc": 6}, seed=0),
        random_batch(B=3, T={"s2": 16, "s1_asc": 4, "s1_desc": 8}, seed=1),
        random_batch(B=2, T={"s2": 12, "s1_asc": 7, "s1_desc": 3}, seed=2),
    ]
    with torch._dynamo.config.patch(error_on_recompile=False):
        for i, batch in enumerate(batches):
            inputs = _inputs(batch)
            with ctx:
                expected = net(inputs).float()
                out = compiled(compiled_inputs(inputs)).float()
            assert torch.allclose(out, expected, atol=tol, rtol=tol), f"{(out - expected).abs().max()}"
            if i == 0:  # after the first trace, new shapes must not recompile
                torch._dynamo.config.error_on_recompile = True


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(MLP_BACKENDS))
def test_compiled_gradients_equal_eager(backend: str) -> None:
    """Training steps on two date counts: the conv backend's backward once failed on the second."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, mlp=backend, **small_net_kwargs()).eval()  # eval: no dropout draws
    compiled = torch.compile(net, fullgraph=True)
    for seed, T in ((3, {"s2": 9, "s1_asc": 5, "s1_desc": 6}), (4, {"s2": 11, "s1_asc": 7, "s1_desc": 5})):
        inputs = _inputs(random_batch(B=2 + seed % 2, T=T, seed=seed))
        net.zero_grad()
        net(inputs).square().mean().backward()
        expected = {n: p.grad.clone() for n, p in net.named_parameters()}
        net.zero_grad()
        compiled(compiled_inputs(inputs)).square().mean().backward()
        for n, p in net.named_parameters():
            diff = (p.grad - expected[n]).abs().max()
            assert torch.allclose(p.grad, expected[n], atol=1e-5, rtol=1e-4), f"{n}: {diff}"


def test_compiled_inputs_pad_to_multiples_of_8_and_at_least_the_bucket_floor() -> None:
    inputs = _inputs(random_batch(T={"s2": 5, "s1_asc": 9, "s1_desc": 16}))
    assert {m: v["x"].shape[1] for m, v in compiled_inputs(inputs).items()} == {"s2": 8, "s1_asc": 16, "s1_desc": 16}
    floored = compiled_inputs(inputs, min_dates={"s2": 24, "s1_asc": 8})
    assert {m: v["doy"].shape[1] for m, v in floored.items()} == {"s2": 24, "s1_asc": 16, "s1_desc": 16}
    assert not floored["s2"]["mask"][:, 5:].any() and torch.equal(floored["s2"]["doy"][:, :5], inputs["s2"]["doy"])


def test_compile_time_formula_and_pay_off_rule() -> None:
    assert compile_seconds(30.5, [0.4, 0.5, 9.0]) == pytest.approx(30.0)  # minus the median later call
    assert compile_seconds(0.3, [0.5]) == 0.0 and compile_seconds(12.0, []) == 12.0
    # 0.2 s saved per step over 100 steps = 20 s: pays for 15 s of compilation, not for 25 s
    assert compile_pays_off(0.5, 0.3, 100, 15.0) == (True, pytest.approx(20.0))
    assert compile_pays_off(0.5, 0.3, 100, 25.0)[0] is False
    measured = {"eager_ms": 500.0, "compiled_ms": 300.0, "compile_s": 15.0}
    assert apply_compile_measurement(measured, 100)["chosen"] is True
    assert apply_compile_measurement(measured, 50) == {
        "chosen": False,
        "saving_s": pytest.approx(10.0),
        "why": "compiled 300 ms vs eager 500 ms per step over 50 steps saves 10 s for 15 s of compilation",
    }


def test_projected_run_rule_decides_without_compiling() -> None:
    """CPU: steps x max gain against ~60 eager steps of compilation; CUDA: seconds against ~40 s."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    # the quickstart: 4 epochs of 32 steps; at most 30 % saved = 38 steps < 60: nothing to measure
    worth, why = compile_worth_measuring(128, cpu)
    assert (COMPILE_MAX_GAIN, COMPILE_COST_STEPS, COMPILE_COST_S) == (0.3, 60.0, 40.0)
    assert not worth and why == (
        "128 steps x 0.30 max gain = 38 eager steps saved at most, under the ~60 eager steps a compilation takes on CPU"
    )
    assert compile_worth_measuring(201, cpu)[0] and not compile_worth_measuring(200, cpu)[0]
    assert compile_worth_measuring(128, cpu, eager_s=100.0) == (worth, why)  # on CPU the step time cancels out
    assert compile_worth_measuring(10_000, cuda, eager_s=0.02)[0]  # 60 s saved at most > 40 s
    assert not compile_worth_measuring(5_000, cuda, eager_s=0.02)[0]  # 30 s < 40 s
    with pytest.raises(ValueError, match="eager step time on CUDA"):
        compile_worth_measuring(10, cuda)
    with pytest.raises(ValueError, match=r"compile_max_gain must be in \(0, 1\), got 1.0"):
        compile_worth_measuring(10, cpu, max_gain=1.0)


def test_every_compilation_is_counted_and_buckets_are_shared_by_every_stage() -> None:
    """Dates varying 5..20 from batch to batch: one graph per bucket reached and mode, none once it is in use.

    The ``eager`` backend runs Dynamo's capture and guards (what decides recompiles) without
    generating code, so this test does not pay inductor's compile time.
    """
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = MTANClassifier({"s2": 10}, 11, mlp="linear", **small_net_kwargs())
    compiled = CompiledNetwork(net, backend="eager")
    before = graphs_compiled()

    def step(stage: str, T: int) -> None:
        net.train(stage == "train")
        inputs = {"s2": random_batch(B=2, T={"s2": T}, seed=T)["s2"]}
        compiled.start_step()
        with torch.set_grad_enabled(stage == "train"):
            out = compiled(inputs)
            if stage == "train":
                out.square().mean().backward()
            else:
                assert torch.allclose(out, net(inputs), atol=1e-5), "padding changed the outputs"
        compiled.end_step(stage)

    for T in (5, 7, 12, 6, 15, 9):  # buckets 8, 8, 16, then 16 for every later batch
        step("train", T)
    for T in (5, 20, 11):  # eval mode + no grad: its own graph, at the shared bucket 16, then 24
        step("val", T)
    step("train", 8)  # the bucket is now 24 for training too
    assert compiled.min_dates == {"s2": 24}
    assert [(c["stage"], c["dates"]) for c in compiled.compilations] == [
        ("train", {"s2": 8}),
        ("train", {"s2": 16}),
        ("val", {"s2": 16}),
        ("val", {"s2": 24}),
        ("train", {"s2": 24}),
    ]
    assert compiled.n_compiles == graphs_compiled() - before == 5
    steady = {"train": compiled._steady["train"], "val": compiled._steady["val"]}
    assert len(steady["train"]) == 4 and len(steady["val"]) == 1
    expected = sum(compile_seconds(c["step_s"], steady[c["stage"]]) for c in compiled.compilations)
    assert compiled.compile_s == pytest.approx(expected)
    record = compiled.record()
    assert record["n_compiles"] == 5 and record["status"] == "on (model.compile=true)"


NATIVE_BF16 = native_bf16("cpu")[0]
"""Where the CPU has native bf16, ``precision: auto`` trains in bf16-mixed: every backend is then checked by default."""


@pytest.mark.parametrize(
    "backend",
    [
        "conv",  # the backend that once trained on NaN when compiled in bf16 on a CPU with native bf16
        pytest.param("linear", marks=[] if NATIVE_BF16 else [pytest.mark.slow]),
        pytest.param("channels_last", marks=[] if NATIVE_BF16 else [pytest.mark.slow]),
    ],
)
def test_compiled_bf16_training_step_is_finite_and_close_to_eager(backend: str) -> None:
    """Forward + backward under CPU bf16 autocast, compiled (inductor) vs eager, on any CPU.

    On a CPU without native bf16 the bf16 kernels are emulated; on one with AVX512-BF16/AMX
    (CI) it runs the native ones. Tolerance: relative 5e-2 on the loss and the gradient
    norm (:data:`~mtan_s1s2.bench.compile_parity.PARITY_RTOL`: bf16 keeps ~3 significant
    digits and compiled kernels round in another order).
    """
    row = compiled_step_parity(backend, "bf16", "cpu", net_kwargs=small_net_kwargs(), seed=5)
    assert row["finite"], f"{backend}: compiled bf16 loss {row['compiled_loss']}, grad norm {row['compiled_grad_norm']}"
    assert PARITY_RTOL["bf16"] == 5e-2
    assert row["compiled_loss"] == pytest.approx(row["eager_loss"], rel=5e-2), row
    assert row["compiled_grad_norm"] == pytest.approx(row["eager_grad_norm"], rel=5e-2), row
    assert row["ok"] and 1.0 < row["eager_loss"] < 5.0  # ~ln(10) for an untrained 10-class head
