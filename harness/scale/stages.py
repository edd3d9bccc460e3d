"""The steps of the scale pipeline (`flashtrie bench scale`, `pipeline.py`); each step appends its records to
``--out`` as it ends.

    flashtrie bench scale-step PROCESS --n 800M --dir /tmp/ftscale/n800M --out scale.jsonl

A process runs a list of steps sharing what they made (the keywords stay in memory from ``gen`` to ``build``,
so the 17.9 GB keyword file of 800M is neither written nor read back unless ``--save-keywords``):

* ``prepare``: gen, queries, warmup, build (+ sizes with ``--marisa-size``);  ``serve``: load, upload, bench,
  check (``--no-check``: none), marisa (when ``--cpu`` names it);  ``gen`` / ``queries`` / ``build`` /
  ``sizes`` / ``check`` / ``bench`` / ``marisa``: one step (or the few it needs), reading the files of earlier
  processes from ``--dir`` (``marisa`` with ``--cpu marisa``: the marisa step alone, after the others).
* Steps (`prepare`, `serve`; what they share: `state`): ``gen`` generates the keywords (`generate_keywords_from`,
  all cores); ``queries`` 16 dense queries, K = 1000 (`generate_queries`, its seconds per step in the record's
  ``split``); ``warmup`` chooses the builder and, for the GPU builder, builds `WARMUP_KEYWORDS` keywords as its own
  stage (cupy's first-use kernel compilation is then not in the build's figure); ``build`` the index (the GPU
  builder where cupy and a GPU are present, else the CPU builder, or ``--builder``) and saves it; ``sizes`` our file
  with and without the keyword-id map against marisa-trie's BinaryTrie with and without one; ``load`` the index with
  verification (its seconds per check in ``split``); ``upload`` `GpuSearcher`; ``bench`` `sweep_beam_width` (beams 1
  ... 1000, K = beam, host arrays in and out) on the GPU and ``--cpu`` numpy at batch 1 (every case compared with
  numpy), the GPU alone at the other ``--batches``; ``check`` GPU == numpy on a few queries; ``marisa`` the marisa
  searcher, its sweep at batch 1 and marisa == numpy on a few queries. The numpy reference is made once per process
  and timed as its own stage (``decode="auto"``: every node decoded up front on small indexes, only the nodes a
  search reaches on large ones; the record's ``decode`` says which), so the check costs seconds at 800M; the check's
  record holds each side's search seconds. Without a GPU the GPU steps record ``skipped`` with the reason.
* ``--budget KEY=SECONDS`` (keys: the step names) and ``--deadline EPOCH`` bound the steps: one past its
  limit is recorded as timed out and the process exits with status 124 (`recorder`).
* Exit status: 0 all ok, 3 a mismatch, 4 a step failed (recorded), 5 a step found no time left (recorded
  as skipped), 124 a step ran past its limit (recorded); anything else is a crash the shell records with
  ``fail --failed PROCESS --message WHY`` (it names the stage in progress from the marker file).
* ``table``: the stage table of ``--out``; ``render RECORDS... --out DIR``: ``DIR/report.md``
  (`harness/scale/report.py`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashtrie.harness.argtypes import count, ints
from flashtrie.harness.records import read_records

from .prepare import step_build, step_gen, step_queries, step_sizes, step_warmup
from .recorder import OutOfTime, Recorder
from .serve import step_bench, step_check, step_marisa, step_upload
from .state import EXIT_FAILED, EXIT_NO_TIME, State, step_load

__all__ = ["PROCESSES", "STEPS", "main", "run_process"]

#: The steps of each process, in order (``sizes`` and ``marisa`` run only when their option asks).
PROCESSES: dict[str, tuple[str, ...]] = {
    "prepare": ("gen", "queries", "warmup", "build", "sizes"),
    "serve": ("load", "upload", "bench", "check", "marisa"),
    "gen": ("gen",), "queries": ("queries",), "build": ("warmup", "build"), "sizes": ("sizes",),
    "check": ("load", "upload", "check"), "bench": ("load", "upload", "bench", "marisa"), "marisa": ("marisa",),
}
_count = count  # 800M, 10k, 1G (the CLI's parser)


STEPS = {"gen": step_gen, "queries": step_queries, "warmup": step_warmup, "build": step_build, "sizes": step_sizes,
         "load": step_load, "upload": step_upload, "check": step_check, "bench": step_bench, "marisa": step_marisa}


def wanted(step: str, args: argparse.Namespace) -> bool:
    """Whether ``step`` of this process runs: ``sizes`` with ``--marisa-size`` (or alone), ``marisa`` when
    ``--cpu`` names it."""
    if step == "sizes":
        return args.marisa_size or args.process == "sizes"
    if step == "marisa":
        return "marisa" in args.cpu
    if step == "check":
        return args.check
    return True


def run_process(rec: Recorder, args: argparse.Namespace) -> int:
    """The steps of ``args.process`` in order, each under its budget.  A step that finds no time left is
    recorded as skipped; a step that fails is recorded as an error and the steps after it as skipped."""
    st = State(Path(args.dir))
    st.d.mkdir(parents=True, exist_ok=True)
    rec.clear_marker()
    rc = 0
    steps = [s for s in PROCESSES[args.process] if wanted(s, args)]
    for i, step in enumerate(steps):
        try:
            with rec.budget(step):
                rc = max(rc, int(STEPS[step](rec, st, args) or 0))
        except OutOfTime as e:
            rec.skip(step, str(e))
            rc = max(rc, EXIT_NO_TIME)
        except Exception as e:  # noqa: BLE001 - recorded (by the span it left, or here), then the rest skipped
            if not rec.recorded(e):
                rec.emit(step, 0.0, status="error", message=f"{type(e).__name__}: {e}"[:2000])
            rec.clear_marker()
            for later in steps[i + 1:]:
                rec.skip(later, f"step {step} failed")
            return EXIT_FAILED
    return rc


# ---------------------------------------------------------------------------------------------- CLI
def stage_table(out: str) -> None:
    recs = [r for r in read_records(out) if r.sweep == "scale"]
    print(f"{'stage':<28} {'N':>12} {'backend':<12} {'seconds':>9} {'peak RSS GB':>12} {'GB/s':>7}  status")
    for r in recs:
        m = r.metrics
        gbs = f"{m['gb_per_s']:.2f}" if m.get("gb_per_s") else ""
        print(f"{r.config.get('stage', '?'):<28} {r.workload.get('N', 0):>12,} {r.backend:<12} {m['seconds']:>9.2f} "
              f"{m['peak_rss_bytes'] / 1e9:>12.1f} {gbs:>7}  {r.status}" + (f": {r.message}" if r.message else ""))
        if m.get("stages"):
            print("    " + ", ".join(f"{name} {sec:.2f} s" for name, sec in m["stages"]))


def _budgets(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in (part for text in items for part in text.split(",") if part):
        key, _, value = item.partition("=")
        if key not in STEPS or not value:
            raise SystemExit(f"--budget: expected STEP=SECONDS with STEP one of {', '.join(STEPS)}, got {item!r}")
        out[key] = float(value)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="flashtrie bench scale-step", description=__doc__.splitlines()[0])
    ap.add_argument("process", choices=(*PROCESSES, "fail", "table"))
    ap.add_argument("--n", type=_count, default=800_000_000, help="keywords (800M, 10M, ...)")
    ap.add_argument("--dir", default="/tmp/ftscale", help="where the keyword, query and index files go")
    ap.add_argument("--out", default="scale.jsonl", help="records file (JSON Lines, appended)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--check-queries", type=int, default=4)
    ap.add_argument("--builder", choices=("auto", "gpu", "cpu"), default="auto")
    ap.add_argument("--save-keywords", action="store_true", help="gen: also write kw.npz (for a later process)")
    ap.add_argument("--marisa-size", action="store_true", help="prepare: also the size comparison with marisa-trie")
    ap.add_argument("--cpu", type=lambda t: [s for s in t.split(",") if s], default=[],
                    help="bench: CPU backends beside the GPU (numpy at batch 1; marisa: its own step)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                    help="GPU == numpy on --check-queries queries (the numpy reference decodes every node first)")
    ap.add_argument("--beams", type=ints, default=[1, 10, 100, 500, 1000])
    ap.add_argument("--batches", type=ints, default=[1])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50, help="timed passes over the queries per case (at most)")
    ap.add_argument("--max-seconds", type=float, default=1.0, help="time per backend and case (after one pass)")
    ap.add_argument("--stats-queries", type=int, default=0,
                    help="queries replayed for the workload statistics (a numpy searcher of its own: 0 = none)")
    ap.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS[,...]")
    ap.add_argument("--deadline", type=float, default=None, help="epoch seconds by which every step must end")
    ap.add_argument("--message", default="", help="fail: what stopped the process")
    ap.add_argument("--failed", default="", help="fail: the process that stopped")
    return ap


def render(argv: list[str]) -> int:
    """``render RECORDS... --out DIR [--commit C]``: the report pipeline (`flashtrie report`) over the records,
    with the commit given by hand where the records' own is wrong (a copied tree)."""
    from flashtrie.harness.report import build_report

    ap = argparse.ArgumentParser(prog="flashtrie bench scale-step render")
    ap.add_argument("records", nargs="+", help="records files (JSON Lines)")
    ap.add_argument("--out", required=True, help="folder for report.md and the figures")
    ap.add_argument("--commit", help="the commit the run's tree was, given by hand (the records' env.git wrong)")
    args = ap.parse_args(argv)
    print(build_report(args.records, args.out, commit=args.commit))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:
        return render(argv[1:])
    args = parser().parse_args(argv)
    if args.process == "table":
        stage_table(args.out)
        return 0
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.out, args.n, ["flashtrie", "bench", "scale-step", *argv],
                   marker=d / "stage.json", budgets=_budgets(args.budget), deadline=args.deadline)
    if args.process == "fail":
        print(f"[scale] {rec.record_failure(args.failed or '?', args.message or 'stopped')}", flush=True)
        return 0
    return run_process(rec, args)


if __name__ == "__main__":
    sys.exit(main())
