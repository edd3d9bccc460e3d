"""The README's examples run as written, each on its own, and print what they say they print."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLES = README.parent / "examples"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def console_blocks() -> list[str]:
    return re.findall(r"```console\n(.*?)```", README.read_text(), re.S)


def _needs(code: str) -> None:
    """Skip an example whose optional packages (the extras) are not installed here."""
    for module in ("torch", "transformers", "tokenizers"):
        if re.search(rf"^\s*(import|from) {module}\b", code, re.M):
            pytest.importorskip(module)


def test_readme_has_the_quick_starts_and_the_decoder_example() -> None:
    text = README.read_text()
    for heading in ("## Quick start: names in, names out", "## Quick start: `generate()`",
                    "## Quick start: the stepwise API", "## Use it from your decoder"):
        assert heading in text, f"README: {heading!r} is missing"
    assert len(blocks()) >= 4


@pytest.mark.parametrize("i", range(len(blocks())))
def test_readme_example_runs_alone_and_prints_what_it_shows(i: int, tmp_path, monkeypatch, capsys) -> None:
    code = blocks()[i]
    _needs(code)
    shutil.copytree(EXAMPLES, tmp_path / "examples")  # as in a fresh clone's root
    monkeypatch.chdir(tmp_path)  # the examples save index files in the working directory
    exec(compile(code, str(README), "exec"), {"__name__": f"readme_{i}"})
    out = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    exact = re.findall(r"^# prints: (.*)$", code, re.M)
    loose = re.findall(r"^# prints \(.*?\): (.*)$", code, re.M)
    assert exact or loose, "README: each example shows its expected output as '# prints: ...'"
    if exact:
        assert out == exact
    else:  # random weights: as many lines (test_readme_generate_example_spells_names checks them)
        assert len(out) == len(loose)


def _timeless(line: str) -> str:
    """A printed line with its measured times (``0.311 ms``, ``0.02 s``) left out."""
    return re.sub(r"\d+\.\d+ (ms|s)\b", r"_ \1", line.rstrip())


def test_readme_has_a_command_line_example() -> None:
    assert console_blocks() and all("$ flashtrie " in b for b in console_blocks())


@pytest.mark.parametrize("i", range(len(console_blocks())))
def test_readme_command_line_example_runs_as_written(i: int, tmp_path, monkeypatch, capsys) -> None:
    """Each `$ flashtrie ...` line runs from a fresh clone's root and prints what follows it (times aside);
    `$ cat FILE` shows the file."""
    from flashtrie.cli import main

    pytest.importorskip("tokenizers")
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    steps = re.split(r"^\$ ", console_blocks()[i], flags=re.M)[1:]
    assert steps, "README: a console block holds `$ command` lines"
    for step in steps:
        command, *shown = step.rstrip("\n").split("\n")
        argv = shlex.split(command)
        if argv[0] == "cat":
            printed = Path(argv[1]).read_text(encoding="utf-8").splitlines()
            assert printed == shown, f"README: {command}"
            continue
        assert argv[0] == "flashtrie", f"README: the example runs only flashtrie and cat, not {command!r}"
        capsys.readouterr()
        assert main(argv[1:]) == 0, f"README: {command}"
        cap = capsys.readouterr()
        out, err = cap.out.splitlines(), cap.err.splitlines()
        want = [_timeless(line) for line in shown]
        assert want in ([_timeless(x) for x in out + err], [_timeless(x) for x in err + out]), f"README: {command}"


def test_readme_generate_example_spells_names() -> None:
    """The generate() example's rows are whole names followed by EOS (with any weights)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    code = next(b for b in blocks() if "generate(" in b)
    ns: dict = {}
    exec(compile(code.replace("print(", "_ = ("), str(README), "exec"), ns)
    ids, index = ns["ids"], ns["index"]
    assert ids.shape == (3,) and ((ids >= 0) & (ids < 4)).all()
    assert all(t in ns["names"] for t in index.texts(ids))


def test_readme_makes_a_virtual_environment_before_installing() -> None:
    """A modern Linux refuses `pip install` outside a virtual environment (externally-managed-environment)."""
    section = README.read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "externally-managed-environment" in section
    venv, pip = section.find("python3 -m venv .venv && . .venv/bin/activate"), section.find("python3 -m pip install")
    assert 0 <= venv < pip, "README: make and activate the virtual environment before the first pip install"


def test_readme_states_the_ci_command() -> None:
    """The development section's first command is the one CI runs."""
    ci = (README.parent / ".ci" / "run").read_text()
    section = README.read_text().split("## Development", 1)[1]
    command = re.search(r"```bash\n.*?(python3 -m nox -s [a-z_ ]+?)\s+#", section, re.S)
    assert command and command.group(1).strip() in ci


def test_noxfile_says_what_ci_runs_and_the_venv_is_ignored() -> None:
    ci = re.search(r"nox -s ([a-z_ ]+)", (README.parent / ".ci" / "run").read_text())
    doc = (README.parent / "noxfile.py").read_text().split('"""')[1]
    assert ci and f"`nox -s {ci.group(1).strip()}` (what CI runs" in doc
    assert ".venv" in (README.parent / ".gitignore").read_text().split()  # the README's virtual environment


def test_readme_development_install_brings_the_test_tools_before_pytest() -> None:
    """`python3 -m pytest` right after the development install: the install names the test extra."""
    section = README.read_text().split("## Development", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README: the development section opens with a bash block"
    lines = block.group(1).splitlines()
    install = next((n for n, line in enumerate(lines) if re.search(r"pip install -e \"?\.\[[^]]*\btest\b", line)), None)
    pytest_at = next(n for n, line in enumerate(lines) if "-m pytest" in line)
    assert install is not None and install < pytest_at
    assert "--index-url https://download.pytorch.org/whl/cpu" in section  # a CPU-only machine: no CUDA torch
