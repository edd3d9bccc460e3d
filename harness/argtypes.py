"""Argument types the lab's command lines share (and the CLI re-uses): counts such as 200k or 2M, lists of them."""

from __future__ import annotations

import argparse
import math

from flashtrie.limits import MAX_BEAM_WIDTH, MAX_PROPOSALS, MAX_RESULTS, MAX_STEPS, MAX_TOKEN

__all__ = ["count", "ints", "beam_width", "beam_widths", "proposals_count", "steps_count", "results_count",
           "vocab_count", "alpha"]


def _parse_count(text: str) -> int | None:
    """``text`` as a positive integer (200000, 200k, 2M, 1G, 1e6), or None when it is not one."""
    t = text.strip().lower().replace("_", "")
    mult = {"k": 10**3, "m": 10**6, "g": 10**9}.get(t[-1:], 1)
    if mult > 1:
        t = t[:-1]
    try:
        v = int(t) * mult
    except ValueError:
        try:
            f = float(t) * mult
        except ValueError:
            return None
        if not math.isfinite(f) or f != int(f):
            return None
        v = int(f)
    return v if v >= 1 else None


def ints(text: str) -> list[int]:
    """A comma-separated list of positive integers; each accepts what `count` does (10, 10k, 1e3)."""
    parts = [t for t in text.replace(" ", "").split(",") if t]
    vals = [_parse_count(t) for t in parts]
    if not parts or any(v is None for v in vals):
        bad = next((t for t, v in zip(parts, vals, strict=True) if v is None), text)
        where = "" if bad == text.strip() else f" in {text!r}"
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of positive integers (such as 1,10,100 "
                                         f"or 10k,100k), got {bad!r}{where}")
    return [int(v) for v in vals if v is not None]


def count(text: str) -> int:
    """An integer >= 1; accepts 200000, 200k, 2M, 1G, 1e6."""
    v = _parse_count(text)
    if v is None:
        raise argparse.ArgumentTypeError(f"expected a positive integer count such as 200000, 200k or 2M, "
                                         f"got {text!r}")
    return v


def beam_width(text: str) -> int:
    """A beam width in [1, `MAX_BEAM_WIDTH`]; accepts what `count` does (100, 1k)."""
    v = _parse_count(text)
    if v is None or v > MAX_BEAM_WIDTH:
        raise argparse.ArgumentTypeError(f"expected a beam width in [1, {MAX_BEAM_WIDTH:,}] such as 10, 100 or 1k, "
                                         f"got {text!r}")
    return v


def beam_widths(text: str) -> list[int]:
    """A comma-separated list of beam widths, each in [1, `MAX_BEAM_WIDTH`] (all checked before any run)."""
    vals = ints(text)
    over = [v for v in vals if v > MAX_BEAM_WIDTH]
    if over:
        raise argparse.ArgumentTypeError(f"beam width {over[0]:,} is over the limit {MAX_BEAM_WIDTH:,}, got {text!r}")
    return vals


def _bounded(text: str, what: str, limit: int, example: str) -> int:
    v = _parse_count(text)
    if v is None or v > limit:
        raise argparse.ArgumentTypeError(f"expected {what} in [1, {limit:,}] such as {example}, got {text!r}")
    return v


def proposals_count(text: str) -> int:
    """K, proposals per step, in [1, `MAX_PROPOSALS`]."""
    return _bounded(text, "a number of proposals per step", MAX_PROPOSALS, "100 or 1k")


def steps_count(text: str) -> int:
    """T, decoding steps, in [1, `MAX_STEPS`]."""
    return _bounded(text, "a number of decoding steps", MAX_STEPS, "8")


def results_count(text: str) -> int:
    """R, results per query, in [1, `MAX_RESULTS`]."""
    return _bounded(text, "a number of results per query", MAX_RESULTS, "10 or 100")


def vocab_count(text: str) -> int:
    """A vocabulary size in [1, `MAX_TOKEN` + 1]."""
    return _bounded(text, "a vocabulary size", MAX_TOKEN + 1, "50k or 2.2M")


def alpha(text: str) -> float:
    """A finite number >= 0 (a length-normalisation exponent)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 such as 0.6, got {text!r}")
    return v
