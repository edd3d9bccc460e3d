"""The run context: who made a run's records, made once per command and handed to every record writer.

A `RunContext` holds the run id every record of one command shares, the command line, and the environment
snapshot of `flashtrie.harness.env` (machine, packages, GPUs, the commit).  `RunContext.record` makes a
`Record` stamped with them and the time it is made; `RunContext.stamp` stamps a record built elsewhere.
The search sweeps (`flashtrie.harness.sweep.SweepContext.run`), the scale pipeline's recorder and the
stepwise suite take one; any other suite adopts it the same way::

    run = RunContext.start()             # once per command: snapshot, this command line, a new run id
    rec = run.record(kind="quality", backend="numpy", metrics={...})
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Sequence
from typing import Any

from .env import snapshot
from .records import Record, new_run_id

__all__ = ["RunContext", "now"]


def now() -> str:
    """The time a record is made: UTC, ISO 8601, to the second."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True)
class RunContext:
    """One command's run id, command line and environment snapshot (empty unless made by `start`)."""

    run_id: str = dataclasses.field(default_factory=new_run_id)
    command: tuple[str, ...] = ()
    env: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def start(cls, argv: Sequence[str] | None = None, *, run_id: str | None = None,
              extra_env: dict[str, Any] | None = None) -> RunContext:
        """The context of this command: an environment snapshot (`flashtrie.harness.env.snapshot`, with
        ``extra_env`` added), ``argv`` (default ``sys.argv``) as its command, and ``run_id`` (default a new
        one; several processes of one run pass the same)."""
        env = {**snapshot(None if argv is None else list(argv)), **(extra_env or {})}
        return cls(run_id=run_id or new_run_id(), command=tuple(env["command"]), env=env)

    @property
    def commit(self) -> str | None:
        """The commit the run's source came from (None when unknown)."""
        return (self.env.get("git") or {}).get("commit")

    def record(self, **fields: Any) -> Record:
        """A `Record` of ``fields`` stamped with this run's environment, command, run id and the time now."""
        return self.stamp(Record(**fields))

    def stamp(self, rec: Record) -> Record:
        """``rec`` with this run's environment, command, run id and the time now (in place; returned)."""
        rec.env, rec.command, rec.run_id, rec.timestamp = self.env, list(self.command), self.run_id, now()
        return rec
