"""The README's examples run as written, each on its own, and print what they say they print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_the_quick_starts_and_the_decoder_example() -> None:
    text = README.read_text()
    for heading in ("## Quick start: names in, names out", "## Quick start: `generate()`",
                    "## Quick start: the stepwise API", "## Use it from your decoder"):
        assert heading in text, f"README: {heading!r} is missing"
    assert len(blocks()) >= 4


@pytest.mark.parametrize("i", range(4))
def test_readme_example_runs_alone_and_prints_what_it_shows(i: int, tmp_path, monkeypatch, capsys) -> None:
    code = blocks()[i]
    if "transformers" in code:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
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
    command = re.search(r"```bash\n.*?(python3 -m nox -s [a-z ]+?)\s+#", section, re.S)
    assert command and command.group(1).strip() in ci
