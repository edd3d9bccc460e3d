"""nox sessions: `nox -s lint tests` (what CI runs), `bench`, `report`, `gpu`, `demo`."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
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
