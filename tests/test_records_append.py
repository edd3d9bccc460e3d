"""Records files survive writers killed mid-append: appends start on a fresh line, damaged lines are skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from flashtrie.harness.records import DamagedRecordWarning, append_record, read_records
from test_harness import _record


def _read(path: Path) -> tuple[list[str], list[str]]:
    """(backends of the records read, warning texts)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        recs = read_records(path)
    return [r.backend for r in recs], [str(x.message) for x in w if issubclass(x.category, DamagedRecordWarning)]


def test_an_append_after_a_partial_line_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    append_record(path, _record(backend="a"))
    whole = path.read_bytes()
    with path.open("ab") as f:
        f.write(whole[: len(whole) // 2])  # a killed append: half a line, no newline
    append_record(path, _record(backend="b"))
    assert path.read_bytes().count(b"\n") == 3  # a, the damaged line ended, b
    got, warned = _read(path)
    assert got == ["a", "b"]
    assert len(warned) == 1 and "line 2: not a whole record" in warned[0]


def test_no_sequence_of_crashes_and_appends_loses_a_whole_record(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    expected = []
    for step, crash in enumerate([False, True, True, False, True, False, False, True]):
        append_record(path, _record(backend=f"b{step}"))
        expected.append(f"b{step}")
        if crash:
            line = (path.read_bytes().splitlines(keepends=True) or [b""])[-1]
            with path.open("ab") as f:
                f.write(line[: max(1, len(line) * step // 9)])
        got, _ = _read(path)
        assert got == expected
    got, warned = _read(path)
    assert got == expected and len(warned) == 1 and "lines 3, 5, 8, 12" in warned[0]


_WRITER = """
import sys
from flashtrie.harness.records import append_record
sys.path.insert(0, sys.argv[2])
from test_harness import _record
big = "x" * (48 << 20)
print("ready", flush=True)
for i in range(1000):
    append_record(sys.argv[1], _record(backend=f"big{i}", message=big, status="error"))
"""


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.5])
def test_a_writer_killed_mid_append_loses_only_its_own_record(tmp_path: Path, delay: float) -> None:
    path = tmp_path / "killed.jsonl"
    append_record(path, _record(backend="before"))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(Path(__file__).parent)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    append_record(path, _record(backend="after"))
    append_record(path, _record(backend="later"))
    got, _ = _read(path)
    assert got[0] == "before" and got[-2:] == ["after", "later"]
    assert all(b.startswith("big") for b in got[1:-2])
    assert path.read_bytes().endswith(b"\n")


_HALF_WRITER = """
import os, signal, sys
from flashtrie.harness import records
sys.path.insert(0, sys.argv[2])
from test_harness import _record
real = os.write
def half_then_killed(fd, data):  # the kernel took part of the write, then the process was killed
    real(fd, data[: len(data) // 2])
    os.kill(os.getpid(), signal.SIGKILL)
records.os.write = half_then_killed
records.append_record(sys.argv[1], _record(backend="killed", message="y" * 100000, status="error"))
"""


def test_a_writer_killed_inside_its_write_is_one_skipped_line(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    append_record(path, _record(backend="before"))
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", _HALF_WRITER, str(path), str(Path(__file__).parent)])
        assert res.returncode == -signal.SIGKILL
        assert not path.read_bytes().endswith(b"\n")  # half a line left
        append_record(path, _record(backend="after"))
    got, warned = _read(path)
    assert got == ["before", "after", "after"]
    assert len(warned) == 1 and "lines 2, 4: not a whole record" in warned[0]
