"""The README is the front door and docs/ the reference: short, links that resolve, commands that run.

A renamed config key or group option breaks a documented command silently; these tests
compose every ``python train.py|eval.py|predict.py ...`` and ``python -m mtan_s1s2.bench ...``
command of the README and of ``docs/*.md`` with Hydra and the start-up config check, and the
slow test runs the README's quickstart training command end to end (shrunk to tiny data).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import QUIET_OVERRIDES, TINY_MODEL_OVERRIDES
from mtan_s1s2.cli.config import CONFIG_DIR
from mtan_s1s2.cli.validate import command_line_error

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 200
ENTRY_POINTS = {"train.py": "train", "eval.py": "eval", "predict.py": "predict", "-m mtan_s1s2.bench": "bench"}
"""Command -> the config it composes (``configs/<name>.yaml``)."""

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _code_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def _prose(text: str) -> str:
    """The text without its fenced code blocks (a ``#`` there is a shell comment, not a heading)."""
    return FENCE.sub("", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, with GitHub's ``-1``, ``-2`` suffixes for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(page.read_text()).splitlines():
        if match := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = github_slug(match.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(page.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def documented_commands(page: Path) -> list[tuple[str, str, list[str]]]:
    """``(command, config name, arguments)`` of every entry-point command in the page's code blocks.

    Continuation lines (``\\``) are joined, shell comments dropped, ``$(...)`` substitutions
    (arguments only known at run time) left out, placeholders such as ``<run>`` kept as plain
    names; ``VAR=value`` prefixes are skipped.
    """
    found = []
    for block in _code_blocks(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            if not re.search(r"\bpython\s+((train|eval|predict)\.py|-m mtan_s1s2\.bench)\b", line):
                continue
            line = re.sub(r"\$\([^)]*\)", "", line)  # $(cat overrides.txt): known at run time only
            words = shlex.split(re.sub(r"<([\w.-]+)>", r"\1", line), comments=True)  # <run>: a path to fill in
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words = words[1:]
            if words[:1] != ["python"]:
                continue
            n = 3 if words[1] == "-m" else 2
            if " ".join(words[1:n]) in ENTRY_POINTS:
                found.append((shlex.join(words), ENTRY_POINTS[" ".join(words[1:n])], words[n:]))
    return found


def first_values(args: list[str]) -> list[str]:
    """The overrides of a command line, each sweep (``-m``, ``a=1,2``) replaced by its first value."""
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    out = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            out.append(f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}")
        else:
            assert override.input_line is not None
            out.append(override.input_line)
    return out


README_COMMANDS = documented_commands(README)
DOCS_COMMANDS = [c for page in DOCS for c in documented_commands(page)]


def test_readme_is_at_most_200_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, (
        f"README.md has {n} lines; move reference material to docs/ (at most {MAX_README_LINES})"
    )


def test_no_machine_specific_paths_in_docs_configs_sources_and_scripts():
    code = [
        p for folder in ("src", "scripts") for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".sh")
    ]
    files = [*PAGES, *sorted((REPO / "configs").rglob("*.yaml")), *code]
    hits = [f"{f.relative_to(REPO)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
            if "/work/" in line]  # fmt: skip
    assert not hits, f"machine-specific paths (use /path/to/... or a path relative to the checkout): {hits}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_existing_files_and_headings(page):
    broken = []
    for target in relative_links(page):
        path_text, _, anchor = target.partition("#")
        path = (page.parent / path_text).resolve() if path_text else page
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and (path.suffix != ".md" or anchor not in anchors(path)):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_pages_hold_commands_of_every_entry_point():
    # the parser below must see the commands, or the composition tests would pass on nothing
    assert {name for _, name, _ in README_COMMANDS} == {"train", "eval", "predict", "bench"}
    assert len(README_COMMANDS) >= 6 and len(DOCS_COMMANDS) >= 30


def test_slugs_follow_github():
    assert github_slug("GPU check (`scripts/gpu_check.sh`)") == "gpu-check-scriptsgpu_checksh"
    assert github_slug("PASTIS-R (`data=pastis`)") == "pastis-r-datapastis"
    assert github_slug("Which data source do I use?") == "which-data-source-do-i-use"


def _compose_all(config_name: str, overrides: list[str]) -> None:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _check_command(line: str, config_name: str, args: list[str]) -> None:
    overrides = first_values(args)
    try:
        _compose_all(config_name, overrides)  # unknown group options, keys, launchers
    except Exception as err:
        pytest.fail(f"`{line}` does not compose: {type(err).__name__}: {err}")
    message = command_line_error(args, config_name)  # what the entry point checks at start-up
    assert message is None, f"`{line}`: {message}"


@pytest.mark.parametrize(("line", "config_name", "args"), README_COMMANDS, ids=[c[0] for c in README_COMMANDS])
def test_readme_commands_compose(line, config_name, args):
    _check_command(line, config_name, args)


@pytest.mark.parametrize(("line", "config_name", "args"), DOCS_COMMANDS, ids=[c[0] for c in DOCS_COMMANDS])
def test_docs_commands_compose(line, config_name, args):
    _check_command(line, config_name, args)


def test_a_renamed_key_or_option_in_a_command_fails_the_check():
    with pytest.raises(pytest.fail.Exception, match="does not compose"):
        _check_command("python train.py mlp=convv", "train", ["mlp=convv"])
    with pytest.raises(pytest.fail.Exception, match="does not compose"):
        _check_command("python train.py -m data.folds=1,2", "train", ["-m", "data.folds=1,2"])
    with pytest.raises(AssertionError, match="batch_size"):
        _check_command("python train.py data.batch_size=abc", "train", ["data.batch_size=abc"])


def _quickstart_train_args() -> list[str]:
    text = README.read_text()
    quickstart = text[text.index("## Quickstart") :]
    block = _code_blocks(quickstart)[0]
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        for i in range(len(words) - 1):
            if words[i] == "python" and words[i + 1] == "train.py":
                args = words[i + 2 :]
                return args[: args.index("&&")] if "&&" in args else args
    raise AssertionError("the README quickstart has no `python train.py` command")


def _outputs_listed_in_readme() -> list[str]:
    """The files of the README's "What a run writes" tree, as globs relative to the run directory."""
    text = README.read_text()
    block = _code_blocks(text[text.index("## What a run writes") :])[0]
    return [line.split()[0].replace("XXX", "*") for line in block.splitlines()[1:] if line.strip()]


def test_the_quickstart_command_and_outputs_are_what_the_slow_test_runs():
    assert _quickstart_train_args() == ["mlp=conv"]
    assert "summary.json" in _outputs_listed_in_readme() and "checkpoints/epoch_*.ckpt" in _outputs_listed_in_readme()


@pytest.mark.slow
def test_readme_quickstart_trains_end_to_end_and_writes_the_listed_outputs(tmp_path):
    tiny = ["data=synthetic_tiny", "trainer=cpu", "trainer.max_epochs=1", *QUIET_OVERRIDES, *TINY_MODEL_OVERRIDES]
    out = subprocess.run(
        [sys.executable, "train.py", *_quickstart_train_args(), *tiny, f"paths.log_dir={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = (tmp_path / "train" / "runs").iterdir()
    missing = [name for name in _outputs_listed_in_readme() if not list(run.glob(name))]
    assert not missing, f"the README lists outputs the run did not write: {missing}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "conv" and summary["n_epochs"] == 1
    assert 0.0 <= summary["metrics"]["test/OA"] <= 1.0 and summary["metrics"]["test/OA"] > 0.0
