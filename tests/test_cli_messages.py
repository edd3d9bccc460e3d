"""The command line gives command-line advice: library errors relayed with flags, not Python arguments."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import text_tokenizers as tt

from flashtrie.cli import main
from flashtrie.cli.advice import NOT_RELAYED, PYTHON_ADVICE, command_line_advice

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("flashtrie", "datasets", "harness", "gpu_impl", "reference_cpu")
#: Python advice in a message: an argument with its value, or a method of the public types.
ADVICE = re.compile(r"\b[a-z_]+=('[^']*'|True|False|None)|\b(NarrowLoudsIndex|KeywordSet|Proposals|SearchConfig)\.\w+")


def raised_messages() -> list[tuple[str, str]]:
    """(file:line, the literal text) of every exception raised with a message in the library (the CLI aside)."""
    out = []
    for root in LIBRARY:
        for f in sorted((ROOT / root).rglob("*.py")):
            if "cli" in f.relative_to(ROOT).parts:
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                    text = "".join(c.value for c in ast.walk(node.exc.args[0])
                                   if isinstance(c, ast.Constant) and isinstance(c.value, str))
                    out.append((f"{f.relative_to(ROOT)}:{node.lineno}", text))
    return out


def test_every_python_advice_in_library_errors_has_its_command_line_form() -> None:
    """A new message with Python advice must be mapped (or listed as never relayed by the command line)."""
    def relayed(hit: str) -> bool:
        return not any(hit.startswith(n) or n.startswith(hit) for n in NOT_RELAYED)

    leaks = [(where, m.group(0)) for where, text in raised_messages()
             for m in ADVICE.finditer(command_line_advice(text)) if relayed(m.group(0))]
    assert leaks == []


def test_each_mapping_still_matches_a_library_message() -> None:
    """A reworded library message would silently bypass the table: each pattern must still occur."""
    texts = [t for _, t in raised_messages()]
    for pattern, _ in PYTHON_ADVICE:
        assert any(re.search(pattern, t) for t in texts), f"no library message matches {pattern!r}"


def test_duplicate_names_say_dash_dash_duplicates_keep(tmp_path, capsys) -> None:
    tt.bpe().save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "dup.txt").write_text("red\nblue\nred\n")
    assert main(["build", str(tmp_path / "dup.txt"), "--tokenizer", str(tmp_path / "tokenizer.json"), "-o",
                 str(tmp_path / "d.ftrie")]) == 2
    err = capsys.readouterr().err
    assert "--duplicates keep" in err and "duplicates='keep'" not in err


def test_build_gpu_without_cupy_fails_before_tokenizing(tmp_path, capsys, monkeypatch) -> None:
    import flashtrie.keywords

    def never(*a: object, **k: object) -> None:
        raise AssertionError("tokenized before the GPU builder was checked")

    monkeypatch.setitem(sys.modules, "cupy", None)  # cupy missing, whatever this machine has
    monkeypatch.setattr(flashtrie.keywords.KeywordSet, "from_texts", never)
    tt.bpe().save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "names.txt").write_text("red\nblue\n")
    assert main(["build", str(tmp_path / "names.txt"), "--tokenizer", str(tmp_path / "tokenizer.json"), "--gpu",
                 "-o", str(tmp_path / "n.ftrie")]) == 2
    err = capsys.readouterr().err
    assert "cupy" in err and "leave out --gpu" in err and "NarrowLoudsIndex" not in err
    assert not (tmp_path / "n.ftrie").exists()


@pytest.mark.parametrize(("python", "cli"), [
    ("x; pass duplicates='keep' to keep them", "x; pass --duplicates keep to keep them"),
    ("or build on the CPU with NarrowLoudsIndex.build", "or build on the CPU (leave out --gpu)"),
    ("(it runs on the CPU): use device='cpu' or 'auto', or", "(it runs on the CPU): use --device cpu or auto, or"),
])
def test_advice_is_rewritten(python: str, cli: str) -> None:
    assert command_line_advice(python) == cli


def test_a_missing_optional_package_is_one_line_naming_its_extra(tmp_path, capsys, monkeypatch) -> None:
    """`quality run` imports torch when it runs: without it, one line that says how to install it."""
    import flashtrie.cli.quality as cq

    def run_without_torch(args: object) -> int:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(cq, "cmd_run", run_without_torch)
    assert main(["quality", "run", str(tmp_path / "t.npz"), "-o", str(tmp_path / "q.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'torch'" in err and "pip install 'flashtrie[hf]'" in err
