"""How many CPUs this process may use, and running independent numpy work on them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["usable_cpus", "in_parallel"]


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one, else the CPU count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


T = TypeVar("T")


def in_parallel(fns: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """The results of independent calls, in order, on up to ``workers`` threads (numpy releases the GIL in
    its array work); in this thread when one worker is enough."""
    workers = min(workers, len(fns))
    if workers <= 1:
        return [f() for f in fns]
    with ThreadPoolExecutor(workers) as ex:
        return [f.result() for f in [ex.submit(fn) for fn in fns]]
