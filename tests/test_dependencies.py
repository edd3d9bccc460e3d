"""Dependencies by role: the library and its commands run without the lab's scipy, matplotlib and tqdm; the lab's
commands name the extra that brings them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LAB_ONLY = ("scipy", "matplotlib", "tqdm")

#: a meta-path finder that refuses the lab's modules, installed before flashtrie is imported
_BLOCK = textwrap.dedent(f"""
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {LAB_ONLY!r}:
                raise ImportError(f"No module named {{name!r}} (blocked)", name=name)
            return None
    sys.meta_path.insert(0, _Block())
""")


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_the_library_and_its_commands_run_without_the_lab(tmp_path: Path) -> None:
    res = _run("""
        import numpy as np
        import flashtrie
        from flashtrie import KeywordSet, NarrowLoudsIndex, Proposals, SearchConfig
        from flashtrie.reference_cpu import MarisaSearcher, NumpySearcher
        from flashtrie.stepwise import TrieStepper
        from flashtrie.cli import main

        def run(*argv):
            rc = main(list(argv))
            assert rc == 0, (argv, rc)

        run("gen-keywords", "-n", "2000", "-o", "kw.npz", "--quiet")
        run("gen-queries", "kw.npz", "-n", "4", "-K", "20", "-o", "q.npz", "--quiet")
        run("build", "kw.npz", "-o", "kw.ftrie", "--quiet")
        run("info", "kw.ftrie")
        run("search", "--index", "kw.ftrie", "--queries", "q.npz", "--beam", "10", "--backend", "numpy")
        run("parity", "--keywords", "kw.npz", "--index", "kw.ftrie", "--queries", "q.npz", "--beam", "10",
            "--backends", "numpy,marisa", "--quiet")
        kws = KeywordSet.from_texts(["a b", "a c", "b"], lambda t: [ord(c) for c in t.split()[0] + t[-1]],
                                    progress=True)
        TrieStepper(NarrowLoudsIndex.build(kws))
        print("library ok")
    """, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "library ok" in res.stdout
    assert "tokenizing: 3/3 texts" in res.stderr  # the plain progress fallback


@pytest.mark.parametrize("argv", [
    ["report", "records.jsonl", "-o", "report"],
    ["bench", "beam", "--index", "kw.ftrie", "--queries", "q.npz", "-o", "beam.jsonl", "--backends", "numpy"],
])
def test_lab_commands_name_the_lab_extra(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "records.jsonl").write_text("")
    res = _run(f"""
        from flashtrie.cli import main
        main(["gen-keywords", "-n", "500", "-o", "kw.npz", "--quiet"])
        main(["gen-queries", "kw.npz", "-n", "2", "-K", "10", "-o", "q.npz", "--quiet"])
        main(["build", "kw.npz", "-o", "kw.ftrie", "--quiet"])
        sys.exit(main({argv!r}))
    """, tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "pip install 'flashtrie[lab]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
