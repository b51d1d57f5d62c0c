"""Precision for the machine: bf16-mixed only where bf16 matrix products are native."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mtan_s1s2.utils.hardware import hardware
from mtan_s1s2.utils.precision import (
    CPUINFO_ENV,
    PRECISIONS,
    check_precision,
    cpu_flags,
    cpuinfo_path,
    native_bf16,
    resolve_precision,
    set_matmul_precision,
    short_precision,
)


def _cpuinfo(tmp_path: Path, flags: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\n")
    return str(path)


def test_bf16_only_with_avx512_bf16_or_amx(tmp_path: Path) -> None:
    avx2 = _cpuinfo(tmp_path, "avx avx2")
    assert cpu_flags(avx2) == {"fpu", "sse2", "avx", "avx2"}
    assert resolve_precision("auto", "cpu", avx2) == (
        "32-true",
        "auto: the CPU has none of avx512_bf16, amx_bf16 (bf16 would be emulated, slower than fp32)",
    )
    sapphire = _cpuinfo(tmp_path, "avx512f avx512_bf16 amx_tile amx_bf16")
    assert resolve_precision("auto", "cpu", sapphire) == ("bf16-mixed", "auto: the CPU has amx_bf16, avx512_bf16")
    assert resolve_precision("16-mixed", "gpu", avx2) == ("16-mixed", "set in the config")
    assert native_bf16("cpu", str(tmp_path / "missing"))[0] is False


def test_this_machine_gets_a_working_precision() -> None:
    precision, reason = resolve_precision("auto", "cpu")
    assert precision in ("32-true", "bf16-mixed") and reason.startswith("auto: ")


def test_matmul_precision_is_checked() -> None:
    set_matmul_precision("highest")
    assert torch.get_float32_matmul_precision() == "highest"
    with pytest.raises(ValueError, match="matmul_precision"):
        set_matmul_precision("low")  # type: ignore[arg-type]


@pytest.mark.parametrize(("fixture", "expected"), [("cpuinfo_bf16", "bf16-mixed"), ("cpuinfo_avx2", "32-true")])
def test_cpuinfo_env_stands_in_for_proc_cpuinfo(monkeypatch: pytest.MonkeyPatch, fixture: str, expected: str) -> None:
    # the suite can be run as on either kind of CPU: MTAN_S1S2_CPUINFO=tests/fixtures/cpuinfo_bf16 pytest
    monkeypatch.setenv(CPUINFO_ENV, str(Path(__file__).parents[1] / "fixtures" / fixture))
    assert cpuinfo_path().endswith(fixture)
    assert resolve_precision("auto", "cpu")[0] == expected
    assert ("avx512_bf16" in hardware()["cpu_flags"]) == (expected == "bf16-mixed")
    assert "faked for tests" in hardware()["cpu"]


def test_autocast_contexts_of_the_prediction_and_bench_precisions():
    from mtan_s1s2.utils.precision import autocast

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast("fp32", "cpu"):
        assert (a @ b).dtype == torch.float32
    with autocast("bf16", torch.device("cpu")):
        assert (a @ b).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"precision must be one of \['fp32', 'bf16', 'fp16'\], got 'bf16-mixed'"):
        autocast("bf16-mixed", "cpu")


FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_explicit_bf16_on_a_cpu_without_native_bf16_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPUINFO_ENV, str(FIXTURES / "cpuinfo_avx2"))
    with pytest.warns(UserWarning) as record:
        precision, reason = resolve_precision("bf16-mixed", "cpu")
    assert precision == "bf16-mixed"  # the user's choice is kept
    assert [str(w.message) for w in record] == [
        "trainer.precision=bf16-mixed, but the CPU has none of avx512_bf16, amx_bf16: bf16 is emulated here, "
        "expect training 3-5x slower than 32-true; set trainer.precision=auto (or 32-true)."
    ]
    assert reason == (
        "set in the config; the CPU has none of avx512_bf16, amx_bf16 (bf16 would be emulated, slower than fp32)"
    )


@pytest.mark.parametrize(("fixture", "requested"), [("cpuinfo_bf16", "bf16-mixed"), ("cpuinfo_avx2", "32-true")])
def test_no_warning_where_the_explicit_precision_is_right(
    monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder, fixture: str, requested: str
) -> None:
    monkeypatch.setenv(CPUINFO_ENV, str(FIXTURES / fixture))
    assert resolve_precision(requested, "cpu") == (requested, "set in the config")
    assert not [w for w in recwarn if "bf16" in str(w.message)]


@pytest.mark.parametrize(("old", "new"), [("fp32", "32-true"), ("bf16", "bf16-mixed"), ("fp16", "16-mixed")])
def test_an_old_short_precision_names_the_new_one(old: str, new: str) -> None:
    with pytest.raises(ValueError) as err:
        check_precision(old, "bench.scaling.precision")
    assert str(err.value) == (
        f"bench.scaling.precision={old} is now bench.scaling.precision={new} "
        "(precisions: 32-true, bf16-mixed, 16-mixed, auto)."
    )
    assert short_precision(new) == old  # the internal short name maps back in one place


def test_one_precision_vocabulary() -> None:
    assert PRECISIONS == ("32-true", "bf16-mixed", "16-mixed", "auto")
    assert [check_precision(p) for p in PRECISIONS] == list(PRECISIONS)
    with pytest.raises(ValueError, match=r"precision='fp8' is not a precision; use one of 32-true, bf16-mixed"):
        check_precision("fp8", "precision")
    assert [short_precision(p) for p in ("32", "bf16-true", "16-true")] == ["fp32", "bf16", "fp16"]  # Lightning's
    with pytest.raises(ValueError, match="resolve auto first"):
        short_precision("auto")
