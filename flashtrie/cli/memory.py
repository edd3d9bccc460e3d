"""What a command holds in memory at once, estimated from its arguments and checked (`check_memory`) before
any work or record; the largest part names the argument to lower.

Each component owns its estimate, next to the code that allocates (measured peaks on small sizes, rounded
up): the keyword generator (`generation_peak_bytes`), the query generator (`queries_peak_bytes`), the index
builder (`build_peak_bytes`), the marisa and numpy searchers (`setup_peak_bytes`, `search_peak_bytes`), the
lab's tiled batches (`tiled_batch_bytes`); the GPU searcher sizes its workspace itself (`gpu_impl/workspace.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flashtrie.errors import InputError

__all__ = ["available_memory", "check_memory", "check_parts", "Part", "generation_part", "build_part",
           "workload_part", "search_part", "library_parts", "marisa_part", "batches_part"]


def available_memory() -> tuple[int, str]:
    """Bytes a run may use here and what bounds it: /proc/meminfo's MemAvailable, or the address-space limit
    (``ulimit -v``) where that is lower."""
    import resource

    have, what = 1 << 62, "no known limit"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                have, what = int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY and soft < have:
        have, what = soft, "the address-space limit (ulimit -v)"
    return have, what


def check_memory(arg: str, value: object, need: int, what: str) -> None:
    """An `InputError` naming the argument, its value and the limit when ``need`` bytes (an estimate of what
    the run holds at once) are more than `available_memory`; called before any work or record."""
    have, source = available_memory()
    if need > have:
        raise InputError(f"{arg}: {value} needs about {_size(need)} of memory for {what}; {_size(have)} are "
                         f"available ({source}); choose a smaller {arg}")


def _size(n: int) -> str:
    """Bytes as ``12.3 GB`` (``45.6 MB`` below a gigabyte, ``0.001 MB`` below a kilobyte)."""
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


#: (argument, its value as shown, bytes, what the bytes are for)
Part = tuple[str, str, int, str]


def check_parts(parts: Sequence[Part]) -> None:
    """`check_memory` of the sum of ``parts``, naming the argument of the largest part."""
    arg, value, _, _ = max(parts, key=lambda p: p[2])
    check_memory(arg, value, sum(p[2] for p in parts), ", ".join(p[3] for p in parts if p[2] > 0))


def generation_part(arg: str, n: int) -> Part:
    """Generating ``n`` keywords."""
    from flashtrie.datasets.keywords import generation_peak_bytes

    return arg, f"{n:,}", generation_peak_bytes(n), f"{n:,} generated keywords"


def build_part(arg: str, value: str, n: int) -> Part:
    """Building the index of ``n`` keywords."""
    from flashtrie.index.builder import build_peak_bytes

    return arg, value, build_peak_bytes(n), f"the index of {n:,} keywords"


def marisa_part(arg: str, value: str, n: int) -> Part:
    """The marisa searcher's trie of ``n`` keywords."""
    from flashtrie.reference_cpu.marisa import MarisaSearcher

    return arg, value, MarisaSearcher.setup_peak_bytes(n), "the marisa trie"


def workload_part(arg: str, value: str, q: int, t: int | None, k: int, library: int = 0) -> Part:
    """Generating ``q`` queries of ``t`` steps of ``k`` proposals from a library of ``library`` keywords."""
    from flashtrie.datasets.queries import DEFAULT_STEPS, queries_peak_bytes

    t = DEFAULT_STEPS if t is None else t
    return arg, value, queries_peak_bytes(q, t, k, library), f"{q:,} queries x {t} steps x {k:,} proposals"


def batches_part(arg: str, value: str, batch: int, t: int, k: int) -> Part:
    """The batches of ``batch`` queries of ``t`` steps of ``k`` proposals a sweep tiles."""
    from flashtrie.harness.workloads import tiled_batch_bytes

    return arg, value, tiled_batch_bytes(batch, t, k), f"batches of {batch:,} queries x {t} steps x {k} proposals"


def search_part(arg: str, value: str, beam: int, batch: int) -> Part:
    """One search call of ``batch`` queries at beam width ``beam``."""
    from flashtrie.reference_cpu.numpy_search import NumpySearcher

    return (arg, value, NumpySearcher.search_peak_bytes(beam, batch),
            f"searching {batch:,} quer{'y' if batch == 1 else 'ies'} per call at beam {beam:,}")


def library_parts(arg: str, n: int, backends: Sequence[str]) -> list[Part]:
    """A generated library of ``n`` keywords, its index, and the marisa trie when marisa runs."""
    parts = [generation_part(arg, n), build_part(arg, f"{n:,}", n)]
    if any(b.startswith("marisa") for b in backends):
        parts.append(marisa_part(arg, f"{n:,}", n))
    return parts
