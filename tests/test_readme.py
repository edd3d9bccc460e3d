"""The README's library example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_decoder_example_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    m = re.search(r"## Use it from your decoder\n\n```python\n(.*?)```", text, re.S)
    assert m, "README: the 'Use it from your decoder' example is missing"
    monkeypatch.chdir(tmp_path)  # it saves library.ftrie in the working directory
    exec(compile(m.group(1), str(README), "exec"), {})
    assert (tmp_path / "library.ftrie").exists()
    out = capsys.readouterr().out
    assert out.startswith("[1 3 0]")  # keywords [12, 7], [40], [12, 7, 9] for this input
    shown = re.search(r"^# prints: (.*)$", m.group(1), re.M)
    assert shown, "README: the example should show its expected output as '# prints: ...'"
    assert out.splitlines()[0] == shown.group(1)


def test_readme_makes_a_virtual_environment_before_installing():
    """A modern Linux refuses `pip install` outside a virtual environment (externally-managed-environment)."""
    text = README.read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert "externally-managed-environment" in section
    venv, pip = section.find("python3 -m venv .venv && . .venv/bin/activate"), section.find("python3 -m pip install")
    assert 0 <= venv < pip, "README: make and activate the virtual environment before the first pip install"


def test_readme_autoregressive_examples_run(capsys):
    """Both snippets of 'Autoregressive decoding' run as written (the second uses the first's index)."""
    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    section = README.read_text().split("## Autoregressive decoding", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "README: the autoregressive section should hold the generate() and the stepwise examples"
    ns: dict = {}
    exec(compile(blocks[0], str(README), "exec"), ns)
    generated = eval(capsys.readouterr().out.strip())  # e.g. [12, 7, 99, 99]
    eos = ns["eos"]
    cut = generated.index(eos)
    assert generated[:cut] in ([12, 7, 9], [12, 7], [40]) and set(generated[cut:]) == {eos}
    exec(compile(blocks[1], str(README), "exec"), ns)
    assert capsys.readouterr().out.strip() == "[False  True]"
