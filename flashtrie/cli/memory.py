"""What a command holds in memory at once, estimated from its arguments and checked (`check_memory`) before
any work or record; the largest part names the argument to lower.

The per-item figures are measured peaks (``tracemalloc`` for numpy allocations, the maximum resident set
for marisa-trie) on small sizes, rounded up with room to spare.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flashtrie.errors import InputError

__all__ = ["available_memory", "check_memory", "check_parts", "Part", "generation_part", "build_part",
           "workload_part", "search_part", "library_parts", "KEYWORD_BYTES", "PROPOSAL_BYTES", "MARISA_BYTES"]

#: Generating a library, peak per keyword (95 to 137 measured at 50k to 800k keywords, with room for the write).
KEYWORD_BYTES = 160
#: `NarrowLoudsIndex.build`, peak per keyword, the index included (126 to 128 measured at 50k and 200k keywords).
BUILD_BYTES = 192
#: The marisa backend's trie and key preparation per keyword (277 measured at 200k keywords).
MARISA_BYTES = 320
#: The query generator's fixed working set (66 to 81 MB measured) and its part per library keyword (about 40).
QUERY_BASE_BYTES = 96 << 20
QUERY_LIBRARY_BYTES = 64
#: The query generator's peak per byte of the workload arrays it returns (2.4 to 2.9 measured at 2M to 16M
#: proposals).
QUERY_ARRAY_FACTOR = 4
#: Bytes of one proposal in a workload: a 4-byte token and a 4-byte logprob.
WORKLOAD_BYTES = 8
#: Bytes held per (query, step, proposal) of a tiled batch: the token, the logprob and the searchers' copies.
PROPOSAL_BYTES = 32
#: A search call's working memory per beam entry and query of the call (the numpy backend's frontier and
#: candidate arrays: about 2 kB measured at beams 100 to 2,000 with K = beam).
BEAM_BYTES = 4096
#: Decoding steps of a generated workload when --steps is not given (the query generator's default).
DEFAULT_STEPS = 8


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
    return arg, f"{n:,}", n * KEYWORD_BYTES, f"{n:,} generated keywords"


def build_part(arg: str, value: str, n: int) -> Part:
    """Building the index of ``n`` keywords."""
    return arg, value, n * BUILD_BYTES, f"the index of {n:,} keywords"


def workload_part(arg: str, value: str, q: int, t: int | None, k: int, library: int = 0) -> Part:
    """Generating ``q`` queries of ``t`` steps of ``k`` proposals from a library of ``library`` keywords."""
    t = DEFAULT_STEPS if t is None else t
    need = QUERY_BASE_BYTES + library * QUERY_LIBRARY_BYTES + QUERY_ARRAY_FACTOR * q * t * k * WORKLOAD_BYTES
    return arg, value, need, f"{q:,} queries x {t} steps x {k:,} proposals"


def search_part(arg: str, value: str, beam: int, batch: int) -> Part:
    """One search call of ``batch`` queries at beam width ``beam``."""
    return arg, value, beam * batch * BEAM_BYTES, f"searching {batch:,} quer{'y' if batch == 1 else 'ies'} per call " \
                                                  f"at beam {beam:,}"


def library_parts(arg: str, n: int, backends: Sequence[str]) -> list[Part]:
    """A generated library of ``n`` keywords, its index, and the marisa trie when marisa runs."""
    parts = [generation_part(arg, n), build_part(arg, f"{n:,}", n)]
    if any(b.startswith("marisa") for b in backends):
        parts.append((arg, f"{n:,}", n * MARISA_BYTES, "the marisa trie"))
    return parts
