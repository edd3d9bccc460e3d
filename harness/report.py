"""The lab's one report pipeline: stored records in, ``report.md`` and its figures out.

Each record belongs to the suite that owns it (`harness/suites.py`): the scale pipeline
(`harness/scale/report.py`), the stepwise suite (`harness/stepwise/report.py`), the real libraries
(`harness/real_report.py`), quality against beam width (`harness/quality_report.py`), the GPU machine's small
measurements (`harness/probe_report.py`) or the search sweeps
(`harness/search_report.py`, which owns the records no other suite owns).  A report holds each present suite's
sections, in the registry's order, its figures, and a table of the metrics its records carry.  It reads records
only; it never runs a search or a benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from flashtrie.errors import InputError
from flashtrie.io_util import _umask, remove_stale_temporaries

from . import probe_report as _probes  # noqa: F401 - registers its suite
from . import quality_report as _quality  # noqa: F401 - registers its suite
from . import real_report as _real  # noqa: F401 - registers its suite
from . import search_report as _search  # noqa: F401 - registers its suite
from .markdown import command_text, table
from .plots import FIGURES
from .records import Record, read_records
from .scale import report as _scale  # noqa: F401 - registers its suite
from .serve import report as _serve  # noqa: F401 - registers its suite
from .stepwise import report as _stepwise  # noqa: F401 - registers its suite
from .suites import SUITES, Page, Suite, suite_of

__all__ = ["build_report", "render_markdown", "command_text", "by_suite"]


def by_suite(records: Sequence[Record]) -> dict[Suite, list[Record]]:
    """The records of each suite, suites in the registry's order."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        s = suite_of(r)
        if s is None:
            raise InputError(f"RESULTS: a {r.kind} record of sweep {r.sweep!r} belongs to no report suite "
                             f"({', '.join(SUITES)})")
        groups.setdefault(s.name, []).append(r)
    return {SUITES[name]: groups[name] for name in SUITES if name in groups}


def _metrics_section(groups: dict[Suite, list[Record]]) -> list[str]:
    """Name, unit and meaning of each registered metric the records carry."""
    rows = []
    for suite, recs in groups.items():
        for name, m in suite.metrics.items():
            if any(m.value(name, r) is not None for r in recs):
                rows.append([suite.name, f"`{name}`", m.unit, m.description])
    return ["## Metrics", "", *table(["suite", "metric", "unit", "meaning"], rows), ""] if rows else []


def render_markdown(records: list[Record], sources: Sequence[str], out_dir: Path, drawn: dict[str, list[Path]],
                    title: str | None = None, commit: str | None = None) -> str:
    """The report text: the title, each suite's sections, the metrics table.  ``drawn`` names the figures
    (drawn beside report.md); ``title`` defaults to the only suite's own (else a generic one)."""
    groups = by_suite(records)
    if title is None:
        only = next(iter(groups)) if len(groups) == 1 else None
        title = only.title if only is not None and only.name != "search" else "flashtrie benchmark report"
        title = title if only is None or only.name != "search" else f"{title}: {out_dir.name}"
    page = Page(sources=list(sources), out_dir=out_dir, drawn=drawn, commit=commit)
    lines = [f"# {title}", ""]
    for suite, recs in groups.items():
        lines += suite.sections(recs, page)
    lines += _metrics_section(groups)
    return "\n".join(lines).rstrip() + "\n"


def draw(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """Every present suite's figures, drawn into ``out_dir``."""
    drawn: dict[str, list[Path]] = {}
    for suite, recs in by_suite(records).items():
        drawn.update(suite.figures(recs, out_dir))
    return drawn


#: The list of files the last report wrote into its folder (so a rewrite removes the ones it no longer writes).
MANIFEST = ".report-files"


def _stale_files(out: Path, written: set[str]) -> list[Path]:
    """Files the last report of ``out`` wrote and this one does not: those its manifest lists, or (a folder
    written before manifests) the search suite's figures (`plots.FIGURES`) beside a report.md."""
    listed = out / MANIFEST
    if listed.is_file():
        names = set(listed.read_text().split("\n"))
    elif (out / "report.md").is_file():
        names = {f"{n}.{ext}" for n in FIGURES for ext in ("png", "svg")}
    else:
        return []
    names = {n for n in names if n and n == Path(n).name and n not in (".", "..", MANIFEST)}
    return [out / n for n in sorted(names - written) if (out / n).is_file()]


def build_report(sources: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
                 title: str | None = None, *, commit: str | None = None) -> Path:
    """Read records, draw the figures and write ``out_dir/report.md``; returns its path (``commit``: the commit
    the records were measured at, given by hand where their own is wrong).

    Everything is written to a temporary folder beside ``out_dir`` first; only when all of it is written
    are the files renamed into ``out_dir`` (report.md last; other files already there, such as the records,
    stay, but the figures the last report wrote and this one does not are removed: `MANIFEST` lists what a
    report wrote), so a failure (a full disk) leaves no partial report.  A killed report leaves that temporary
    folder (``.NAME.XXXXXXXX.tmp``); the next report of the same ``out_dir`` removes it once it is an hour old.
    """
    import shutil
    import tempfile

    records = read_records(*sources)
    if not records:
        raise InputError(f"RESULTS: no records in {', '.join(str(s) for s in sources)}; run 'flashtrie bench ...' "
                         "first (it appends records to its -o file)")
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out, folders=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        drawn = draw(records, tmp)
        text = render_markdown(records, [str(s) for s in sources], out, drawn, title, commit)
        (tmp / "report.md").write_bytes(text.encode())
        written = {p.name for p in tmp.iterdir()}
        (tmp / MANIFEST).write_text("".join(f"{n}\n" for n in sorted(written)))
        if not out.exists():
            os.chmod(tmp, 0o777 & ~_umask())  # a folder like any other, not mkdtemp's 0700
            os.replace(tmp, out)
            return out / "report.md"
        stale = _stale_files(out, written)
        for p in sorted(tmp.iterdir(), key=lambda p: p.name == "report.md"):
            os.replace(p, out / p.name)
        for p in stale:
            p.unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.md"
