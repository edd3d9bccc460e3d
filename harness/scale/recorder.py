"""Records of the scale pipeline's stages (`flashtrie bench scale`): one record per finished stage, written at once.

* `Recorder.span` times one stage, measures the stage's own peak host RSS (the kernel's high-water mark is
  reset at the start where Linux allows it, ``/proc/self/clear_refs``; else the process's peak so far) and
  appends its record on exit; an exception inside is recorded as an ``error`` and raised again.
* `Recorder.budget` bounds a group of stages by a time limit (and by the run's ``deadline``, an epoch
  time): a watchdog thread records the stage in progress as timed out and ends the process with status
  124, so the shell carries on with the next size.  The watchdog needs the interpreter's lock; a C call
  that holds it delays the watchdog, which is why the shell's ``timeout`` stays as the backstop.
* A marker file names the stage in progress (and whether its failure is recorded already), so the shell's
  ``fail`` step can name the stage of a process that was killed (a timeout, out of memory).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flashtrie.harness.records import append_record
from flashtrie.harness.run_context import RunContext

__all__ = ["Recorder", "OutOfTime", "peak_rss", "reset_peak_rss", "current_rss", "LIBRARY"]

LIBRARY = "gen-keywords default library"
TIMED_OUT = 124  # the exit status of a stage past its budget (as `timeout` uses)


class OutOfTime(Exception):
    """No time left before the run's deadline to start a group of stages."""


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark (Linux ``clear_refs`` 5); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kb("VmHWM") is not None
    except OSError:
        return False


def peak_rss() -> int:
    """Peak resident memory of this process since start (or since `reset_peak_rss`), bytes."""
    hwm = _status_kb("VmHWM")
    return hwm if hwm is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def current_rss() -> int | None:
    """Resident memory of this process now, bytes (None off Linux)."""
    return _status_kb("VmRSS")


class Recorder:
    """Appends one record (kind ``build``, sweep ``scale``) per finished stage; prints a line for each."""

    def __init__(self, out: str, n: int, argv: list[str], *, marker: Path | None = None,
                 budgets: dict[str, float] | None = None, deadline: float | None = None,
                 exit: Callable[[int], None] = os._exit) -> None:
        self.out, self.n = out, n
        shell = os.environ.get("SCALE_COMMAND")  # the shell's own command line (`flashtrie bench scale` sets it)
        #: the run every stage's record belongs to (one run id across the pipeline's processes)
        self.run = RunContext.start(argv, run_id=os.environ.get("SCALE_RUN_ID"),
                                    extra_env={"scale_command": shell} if shell else None)
        self.marker, self.budgets, self.deadline = marker, dict(budgets or {}), deadline
        self._exit = exit
        self._current: tuple[str, str, float] | None = None  # (stage, backend, start) of the open span
        self._recorded: list[BaseException] = []  # exceptions a span has recorded already
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ records
    def emit(self, stage: str, seconds: float, *, backend: str = "host", nbytes: int | None = None,
             status: str = "ok", message: str | None = None, **extra: Any) -> None:
        """Append the record of one stage (``extra``: further metrics)."""
        metrics: dict[str, Any] = {"seconds": round(seconds, 3), "peak_rss_bytes": peak_rss(), **extra}
        metrics.setdefault("rss_scope", "process")
        if nbytes is not None:
            metrics["bytes"] = int(nbytes)
            metrics["gb_per_s"] = round(nbytes / seconds / 1e9, 3) if seconds > 0 else None
        rec = self.run.record(kind="build", backend=backend, status=status, message=message, sweep="scale",
                              workload={"N": self.n, "name": LIBRARY}, config={"stage": stage}, metrics=metrics)
        with self._lock:
            append_record(self.out, rec)
        gb = f"  {metrics['gb_per_s']:.2f} GB/s" if metrics.get("gb_per_s") else ""
        print(f"[scale {_n(self.n)}] {stage:<28} {seconds:8.2f} s  peak RSS {metrics['peak_rss_bytes'] / 1e9:6.1f} GB"
              f"{gb}" + (f"  {status}: {message}" if status != "ok" else ""), flush=True)

    def skip(self, stage: str, why: str, *, backend: str = "host") -> None:
        """A ``skipped`` record: the stage could not run here (no GPU, no time left)."""
        self.emit(stage, 0.0, backend=backend, status="skipped", message=why)

    @contextmanager
    def span(self, stage: str, *, backend: str = "host") -> Iterator[dict[str, Any]]:
        """Time ``stage``; the caller may fill the yielded dict with metrics (``nbytes``, ``status``,
        ``message``, ``backend`` go to the record's fields).  The record is appended on exit."""
        scope = "stage" if reset_peak_rss() else "process"
        t0 = time.perf_counter()
        self._current = (stage, backend, t0)
        self._mark({"stage": stage, "started": time.time(), "recorded": False, "pid": os.getpid()})
        extra: dict[str, Any] = {}
        try:
            yield extra
        except BaseException as e:
            self._current = None
            self.emit(stage, time.perf_counter() - t0, backend=backend, status="error",
                      message=f"{type(e).__name__}: {e}"[:2000], rss_scope=scope)
            self._mark({"stage": stage, "recorded": True})
            self._recorded.append(e)
            raise
        self._current = None
        fields = {k: extra.pop(k) for k in ("nbytes", "status", "message", "backend") if k in extra}
        self.emit(stage, time.perf_counter() - t0, rss_scope=scope, rss_end_bytes=current_rss(),
                  **{"backend": backend, **fields}, **extra)
        self._mark(None)

    def recorded(self, e: BaseException) -> bool:
        """Whether a span has recorded ``e`` (as it left the span) already."""
        return any(e is r for r in self._recorded)

    def timed(self, stage: str, fn: Callable[[], Any], *, backend: str = "host",
              nbytes: Callable[[Any], int] | None = None, **extra: Any) -> Any:
        """``fn()`` inside `span`; ``nbytes(value)`` gives the bytes it moved."""
        with self.span(stage, backend=backend) as m:
            value = fn()
            m.update(extra)
            if nbytes is not None:
                m["nbytes"] = int(nbytes(value))
        return value

    # ------------------------------------------------------------------ time limits
    def time_left(self) -> float:
        """Seconds to the run's deadline (infinite without one)."""
        return float("inf") if self.deadline is None else self.deadline - time.time()

    @contextmanager
    def budget(self, key: str) -> Iterator[float]:
        """Run the enclosed stages under ``budgets[key]`` and the deadline; raises `OutOfTime` at once when
        under 1 s is left.  Past the limit the watchdog records the open stage as timed out and exits (124)."""
        limit = min(self.budgets.get(key, float("inf")), self.time_left())
        if limit < 1.0:
            raise OutOfTime(f"{key}: no time left before the run's deadline")
        timer = None
        if limit != float("inf"):
            why = "the run's deadline" if limit < self.budgets.get(key, float("inf")) else f"its limit ({key})"
            timer = threading.Timer(limit, self._expired, (key, limit, why))
            timer.daemon = True
            timer.start()
        try:
            yield limit
        finally:
            if timer is not None:
                timer.cancel()

    def _expired(self, key: str, limit: float, why: str) -> None:
        cur = self._current
        stage, backend, t0 = cur if cur is not None else (key, "host", time.perf_counter() - limit)
        msg = f"timed out: ran past {why}, {limit:.0f} s"
        try:
            self.emit(stage, time.perf_counter() - t0, backend=backend, status="error", message=msg)
            self._mark({"stage": stage, "recorded": True})
        finally:
            sys.stdout.flush()
            self._exit(TIMED_OUT)

    # ------------------------------------------------------------------ the marker file
    def _mark(self, state: dict[str, Any] | None) -> None:
        if self.marker is None:
            return
        try:
            if state is None:
                self.marker.unlink(missing_ok=True)
            else:  # temp + rename: a process killed mid-write leaves the old marker, never half of one
                tmp = self.marker.with_name(f".{self.marker.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(state))
                os.replace(tmp, self.marker)
        except OSError:
            pass

    def clear_marker(self) -> None:
        self._mark(None)

    def record_failure(self, process: str, why: str) -> str:
        """The shell's report of a process that ended badly: an error record for the stage the marker
        names (unless that process recorded it already), else for the process.  Returns what it did."""
        state: dict[str, Any] = {}
        if self.marker is not None and self.marker.is_file():
            try:
                state = json.loads(self.marker.read_text())
            except (OSError, ValueError):
                state = {}
        self._mark(None)
        if state.get("recorded"):
            return f"{process}: {why}; stage {state.get('stage')!r} recorded its own failure"
        if state.get("stage"):
            ran = time.time() - float(state.get("started", time.time()))
            self.emit(str(state["stage"]), ran, status="error", message=f"process {process}: {why} in this stage")
            return f"{process}: {why} in stage {state['stage']!r} after {ran:.0f} s"
        self.emit(process, 0.0, status="error", message=f"process {process}: {why} (between stages)")
        return f"{process}: {why}"


def _n(n: int) -> str:
    for unit, word in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{word}"
    return str(n)
