"""nox sessions: `nox -s lint typecheck tests hf_compat` (what CI runs, .ci/run), `bench`, `report`,
`gpu` (GPU runners), `demo`."""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "typecheck"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree, then import-linter's layer contracts (pyproject.toml) over the package as
    installed: its subpackages come from other folders (pyproject's package-dir), so the checkout's own
    flashtrie/ folder is not the package, and lint-imports runs from a temporary folder."""
    import shutil

    session.install("ruff>=0.5", "import-linter>=2.1")
    session.run("ruff", "check", ".")
    root = Path(__file__).resolve().parent
    shutil.rmtree(root / "build", ignore_errors=True)  # setuptools' scratch folder: stale files would be installed
    session.install("--no-deps", "--force-reinstall", os.fspath(root))  # a copy in the session's venv, not editable
    shutil.rmtree(root / "build", ignore_errors=True)
    session.chdir(session.create_tmp())
    session.run("lint-imports", os.fspath(root / "pyproject.toml"))


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (GPU tests skip themselves where no GPU is present; kernels still compile)."""
    session.install("torch==2.13.0")  # a CPU wheel (pip's find-links); then the `hf` extra finds it installed
    session.install("-e", ".[test,gpu,hf,real,lab]")
    session.install("--no-deps", "openai-whisper==20250625")  # only its gpt2.tiktoken is read (real libraries)
    session.run("python", "-m", "pytest", "-q", *session.posargs)


#: What `typecheck` checks: the whole package as installed (flashtrie.reference_cpu is the folder reference_cpu/).
TYPECHECKED = ["flashtrie"]
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
    """mypy over every package: the core, cli and hf, the backends, the data sets and the lab (configuration in
    pyproject.toml; optional third-party libraries are opaque there, so mypy and numpy are all it installs)."""
    session.install("mypy>=1.10", "numpy>=2.0")
    root = Path(__file__).resolve().parent
    overlay = _overlay(root, Path(session.create_tmp()) / "typecheck")
    session.chdir(overlay)
    session.run("mypy", "--config-file", os.fspath(root / "pyproject.toml"), *TYPECHECKED, *session.posargs)


#: The oldest and the newest transformers release the `hf` extra supports (its bounds in pyproject.toml):
#: `in_hook_position` reaches into `generate()`'s private `_get_logits_processor`, so a change there fails here.
HF_RELEASES = ["4.50.0", "5.25.0"]
#: The processor's tests: the hook comparison, the processor settings, `generated_keywords`.
HF_TESTS = ["tests/test_hf.py", "tests/test_hf_processors.py", "tests/test_generated_keywords.py"]


@nox.session
@nox.parametrize("transformers", HF_RELEASES, ids=[f"transformers-{v}" for v in HF_RELEASES])
def hf_compat(session: nox.Session, transformers: str) -> None:
    """The processor's tests against one supported transformers release (CPU torch as in `tests`): `nox -s
    hf_compat` runs the oldest and the newest, so that a change upstream fails here first (CI runs both).  On
    2 busy CPU cores the pair's tests take about 3 minutes (most of it 5.25.0's), and each release's first
    install about 4 more."""
    session.install("torch==2.13.0")
    session.install("-e", ".[test]", f"transformers=={transformers}")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *HF_TESTS, *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """CPU micro-benchmarks with pytest-benchmark; runs are saved, compare with --benchmark-compare."""
    session.install("-e", ".[test,lab]")
    session.run("python", "-m", "pytest", "benchmarks", "--benchmark-enable", "--benchmark-autosave",
                "--benchmark-columns=min,median,mean,stddev,rounds", *session.posargs)


@nox.session
def report(session: nox.Session) -> None:
    """Every CPU sweep on this machine, then the Markdown report under reports/cpu/."""
    session.install("-e", ".[lab]")
    session.run("bash", "reports/make_cpu_report.sh", *session.posargs, external=True)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """On a CUDA 12/13 machine, in the current environment (``pip install -e ".[gpu,test,lab]"`` first): kernel
    compile and GPU tests, exact parity gpu = numpy = marisa on a standard workload, a short beam sweep and
    its report.  Fails when there is no usable GPU, a test fails or any result differs.

    Records and the report go to $FLASHTRIE_GPU_OUT (default gpu-report/); GPU_N sets the library size
    (default 200k keywords)."""
    import glob
    import os
    import tempfile

    out = os.environ.get("FLASHTRIE_GPU_OUT", "gpu-report")
    n = os.environ.get("GPU_N", "200k")
    records = os.path.join(out, "records")
    os.makedirs(records, exist_ok=True)
    for old in glob.glob(os.path.join(records, "*.jsonl")):
        os.remove(old)
    session.run("python", "-c", "import sys; from flashtrie.harness.backends import availability; "
                "why = availability('gpu'); sys.exit(f'the gpu backend cannot run here: {why}' if why else 0)")
    session.run("python", "-m", "pytest", "-q", "-ra", "tests/test_gpu_compile.py", "tests/test_gpu_search.py",
                *session.posargs)
    data = tempfile.mkdtemp(prefix="flashtrie-gpu-")
    kw, q, idx = (os.path.join(data, f) for f in ("kw.npz", "q.npz", "kw.ftrie"))
    session.run("flashtrie", "gen-keywords", "-n", n, "-o", kw, "--quiet")
    session.run("flashtrie", "gen-queries", kw, "-n", "16", "-K", "1000", "--preset", "dense", "-o", q, "--quiet")
    session.run("flashtrie", "build", kw, "-o", idx, "--quiet")
    for beam in ("100", "1000"):  # exit status 1 on any difference in ids, order or float32 bits
        session.run("flashtrie", "parity", "--keywords", kw, "--index", idx, "--queries", q, "--beam", beam,
                    "--backends", "numpy,gpu,marisa", "--records", os.path.join(records, "parity.jsonl"), "--quiet")
    session.run("flashtrie", "bench", "beam", "--index", idx, "--queries", q, "--backends", "gpu,numpy",
                "--beams", "10,100,1000", "--repeats", "3", "--max-seconds", "5",
                "-o", os.path.join(records, "beam.jsonl"), "--quiet")
    session.run("flashtrie", "report", *sorted(glob.glob(os.path.join(records, "*.jsonl"))), "-o", out,
                "--title", f"flashtrie GPU session ({n} keywords, dense workload)")


@nox.session
def demo(session: nox.Session) -> None:
    """The end-to-end demo in a fresh environment."""
    session.install("-e", ".[gpu]")
    session.run("flashtrie", "demo", *session.posargs)
