"""nox sessions: `nox -s lint tests` (what CI runs), `typecheck`, `bench`, `report`, `gpu`, `demo`."""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "typecheck"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (GPU tests skip themselves where no GPU is present; kernels still compile)."""
    session.install("torch==2.13.0")  # a CPU wheel (pip's find-links); then the `hf` extra finds it installed
    session.install("-e", ".[test,gpu,hf]")
    session.run("python", "-m", "pytest", "-q", *session.posargs)


#: The modules `typecheck` checks (as installed: flashtrie.reference_cpu is the folder reference_cpu/).
TYPECHECKED = ["flashtrie/errors.py", "flashtrie/limits.py", "flashtrie/tokens.py", "flashtrie/proposals.py",
               "flashtrie/scoring.py", "flashtrie/cpus.py", "flashtrie/search_types.py", "flashtrie/search_core.py",
               "flashtrie/reference_cpu", "flashtrie/harness/parity.py", "flashtrie/harness/backends.py"]
#: Source folders installed as subpackages of flashtrie (pyproject's package-dir).
_SUBPACKAGES = ("reference_cpu", "harness", "gpu_impl", "datasets")


def _overlay(root: Path, into: Path) -> Path:
    """A folder ``into/flashtrie`` of links that mirrors the installed package, so mypy resolves
    ``flashtrie.reference_cpu`` and friends to their source folders."""
    pkg = into / "flashtrie"
    pkg.mkdir(parents=True, exist_ok=True)
    for src in [*(root / "flashtrie").iterdir(), *(root / d for d in _SUBPACKAGES)]:
        link = pkg / src.name
        if not link.is_symlink():
            link.symlink_to(src)
    return into


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the search core, the CPU backends and the parity harness (configuration in pyproject.toml)."""
    session.install("mypy>=1.10", "numpy>=2.0")
    root = Path(__file__).resolve().parent
    overlay = _overlay(root, Path(session.create_tmp()) / "typecheck")
    session.chdir(overlay)
    session.run("mypy", "--config-file", os.fspath(root / "pyproject.toml"), *TYPECHECKED, *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """CPU micro-benchmarks with pytest-benchmark; runs are saved, compare with --benchmark-compare."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "benchmarks", "--benchmark-enable", "--benchmark-autosave",
                "--benchmark-columns=min,median,mean,stddev,rounds", *session.posargs)


@nox.session
def report(session: nox.Session) -> None:
    """Every CPU sweep on this machine, then the Markdown report under reports/cpu/."""
    session.install("-e", ".")
    session.run("bash", "reports/make_cpu_report.sh", *session.posargs, external=True)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """On a GPU machine, in the current environment: GPU tests, sanitizer, parity and the GPU benchmark."""
    session.run("bash", "gpu_impl/device_check.sh", *session.posargs, external=True)


@nox.session
def demo(session: nox.Session) -> None:
    """The end-to-end demo in a fresh environment."""
    session.install("-e", ".[gpu]")
    session.run("flashtrie", "demo", *session.posargs)
