"""Markdown pieces every suite's report sections share: numbers as text, tables, stored commands."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from typing import Any

__all__ = ["fmt", "table", "command_text"]


def fmt(v: Any, digits: int = 3) -> str:
    """A number for a table: thousands separated, ``digits`` significant digits below 100, a dash for none."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.1f}"
        return f"{v:.{digits}g}" if abs(v) < 0.01 else f"{v:.{digits}f}".rstrip("0").rstrip(".") or "0"
    return str(v)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table's lines (cells through `fmt`, pipes escaped)."""
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for row in rows:
        out.append("| " + " | ".join(fmt(c).replace("|", "\\|") for c in row) + " |")
    return out


def command_text(cmd: Sequence[str]) -> str:
    """A stored argv as a shell command (the entry-point path shortened to ``flashtrie``)."""
    if not cmd:
        return ""
    parts = list(cmd)
    head = os.path.basename(parts[0])
    if head in ("flashtrie", "__main__.py", "cli.py"):
        parts[0] = "flashtrie"
    return shlex.join(parts)
