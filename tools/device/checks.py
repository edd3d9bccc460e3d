"""The table of the GPU machine's checks (tools/device/checks.toml), for the runner check.sh.

    python3 tools/device/checks.py list            the checks and what each does
    python3 tools/device/checks.py names NAME...   exit status 2 naming an unknown check
    python3 tools/device/checks.py steps NAME      one line a step: NAME TAB TIMEOUT TAB hard|soft TAB COMMAND
    python3 tools/device/checks.py summary NAME    the check's summary command (empty: the runner's default)
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("checks.toml")


@dataclass(frozen=True)
class Step:
    name: str
    timeout: int
    run: str  # one command line for bash
    soft: bool = False  # its failure does not fail the check


@dataclass(frozen=True)
class Check:
    name: str
    help: str
    steps: tuple[Step, ...]
    summary: str = ""


def _step(check: str, raw: dict[str, Any]) -> Step:
    extra = set(raw) - {"name", "timeout", "run", "soft"}
    if extra or not isinstance(raw.get("name"), str) or not isinstance(raw.get("run"), str):
        raise ValueError(f"{TABLE.name}: check {check!r}: a step needs a name and a run (and no {sorted(extra)})")
    timeout = raw.get("timeout")
    if not isinstance(timeout, int) or not 0 < timeout <= 600:
        raise ValueError(f"{TABLE.name}: check {check!r}, step {raw['name']!r}: timeout {timeout!r} is not in 1..600")
    run = " ".join(line.strip() for line in raw["run"].splitlines() if line.strip())
    return Step(raw["name"], timeout, run, bool(raw.get("soft", False)))


def load(path: Path = TABLE) -> dict[str, Check]:
    """The checks, in the table's order; a malformed table is refused with a ValueError naming the check."""
    checks: dict[str, Check] = {}
    for name, raw in tomllib.loads(path.read_text(encoding="utf-8")).items():
        if not isinstance(raw, dict) or not raw.get("steps") or not isinstance(raw.get("help"), str):
            raise ValueError(f"{path.name}: check {name!r} needs a help line and at least one step")
        checks[name] = Check(name, raw["help"], tuple(_step(name, s) for s in raw["steps"]), raw.get("summary", ""))
    return checks


def main(argv: list[str]) -> int:
    checks = load()
    what, names = (argv[0], argv[1:]) if argv else ("list", [])
    unknown = [n for n in names if n not in checks]
    if unknown or what not in ("list", "names", "steps", "summary"):
        print(f"unknown check {unknown[0]!r} (the checks: check.sh list)" if unknown else __doc__, file=sys.stderr)
        return 2
    if what == "list":
        print("\n".join(f"  {c.name:<12} {c.help}" for c in checks.values()))
    for name in names if what in ("steps", "summary") else []:
        c = checks[name]
        out = [f"{s.name}\t{s.timeout}\t{'soft' if s.soft else 'hard'}\t{s.run}" for s in c.steps]
        print("\n".join(out) if what == "steps" else c.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
