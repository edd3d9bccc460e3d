"""The steps of the ``prepare`` process: generate the keywords and the queries, warm the builder up, build and save
the index, compare its size with marisa-trie's."""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

from .recorder import Recorder
from .state import State, keyword_bytes, keywords

__all__ = ["WARMUP_KEYWORDS", "build_with", "choose_builder", "step_build", "step_gen", "step_queries",
           "step_sizes", "step_warmup"]

#: Keywords of the GPU builder's warm-up build (cupy compiles its kernels on first use, about 20 s on a fresh
#: machine; cached on disk after that): enough for every path of the build (high labels, links, duplicates).
WARMUP_KEYWORDS = 20_000


def step_gen(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    from flashtrie.datasets import KeywordParams, generate_keywords_from, save_keywords

    params = KeywordParams(n=rec.n, seed=args.seed)
    st.ks = rec.timed("generate keywords", lambda: generate_keywords_from(params), backend="datasets",
                      nbytes=keyword_bytes, threads=os.cpu_count())
    if args.save_keywords or args.process == "gen":
        rec.timed("save keywords", lambda: save_keywords(st.kw_path, st.ks, params),
                  nbytes=lambda _: keyword_bytes(st.ks))


def step_queries(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    from flashtrie.datasets import generate_queries, save_workload

    ks = keywords(rec, st)
    split: dict[str, float] = {}  # seconds per step, filled by the time the record is written
    st.wl = rec.timed(f"generate {args.queries} queries", lambda: generate_queries(
        ks, args.queries, proposals_per_step=1000, preset="dense", seed=args.seed, timings=split),
        backend="datasets", queries=args.queries, K=1000, split=split)
    save_workload(st.queries_path, st.wl)


def choose_builder(wanted: str) -> tuple[str, str | None]:
    """("gpu" | "cpu", why the GPU builder is not used): ``auto`` takes the GPU builder where it can run."""
    if wanted != "auto":
        return wanted, None
    try:
        from flashtrie.arrays import cupy_module

        cupy_module()
        return "gpu", None
    except Exception as e:  # noqa: BLE001 - no cupy or no device: the CPU builder
        return "cpu", f"{type(e).__name__}: {e}"


def build_with(builder: str, ks: Any, progress: Any = None, ids: str = "input") -> Any:
    """A `NarrowLoudsIndex` of ``ks`` from the GPU or the CPU builder (the same arrays)."""
    if builder == "gpu":
        from flashtrie.gpu_impl.build_gpu import build_index

        return build_index(ks, progress, ids=ids)
    from flashtrie import NarrowLoudsIndex

    return NarrowLoudsIndex.build(ks, progress, ids=ids)


def step_warmup(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    """Chooses the builder; for the GPU builder, one build of `WARMUP_KEYWORDS` keywords as its own stage, so
    that cupy's first-use kernel compilation is not charged to the build's figure."""
    st.builder, st.no_gpu_builder = choose_builder(args.builder)
    if st.no_gpu_builder:
        print(f"[scale] GPU builder unavailable ({st.no_gpu_builder}); building on the CPU", flush=True)
    if st.builder != "gpu":
        return
    from flashtrie.datasets import generate_keywords

    small = generate_keywords(WARMUP_KEYWORDS, seed=args.seed + 1, threads=1)
    rec.timed("GPU builder warm-up", lambda: build_with("gpu", small), backend="gpu", keywords=WARMUP_KEYWORDS)


def step_build(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    ks = keywords(rec, st)
    if st.builder is None:
        step_warmup(rec, st, args)
    why = st.no_gpu_builder
    assert st.builder is not None  # (chosen by step_warmup)
    marks: list[tuple[str, float]] = []
    with rec.span("build", backend=st.builder) as m:
        t0 = time.perf_counter()
        idx = build_with(st.builder, ks, lambda stage: marks.append((stage, time.perf_counter())))
        t1 = time.perf_counter()
        m.update(nbytes=keyword_bytes(ks), num_nodes=int(idx.num_nodes), num_unique=int(idx.num_unique),
                 stages=[[s, round((marks[i + 1][1] if i + 1 < len(marks) else t1) - t, 3)]
                         for i, (s, t) in enumerate(marks)], build_seconds=round(t1 - t0, 3))
        if why:
            m["gpu_builder_unavailable"] = why[:300]
    with rec.span("save index") as m:
        idx.save(st.index_path)
        size = st.index_path.stat().st_size
        m.update(nbytes=size, bytes_per_keyword=round(size / rec.n, 3),
                 array_bytes={k: int(v.nbytes) for k, v in idx.arrays.items()}, id_map_bytes=_map_bytes(idx))
    print(f"[scale] index file {size / 2**30:.2f} GiB, {size / rec.n:.2f} B/keyword", flush=True)
    st.idx = idx


def _map_bytes(idx: Any) -> int:
    """Bytes of the keyword-id map among the index's arrays (0: no map)."""
    kid = getattr(idx, "keyword_ids", None)
    if kid is not None and getattr(kid, "size", 1) == 0:
        return 0
    return sum(int(v.nbytes) for k, v in idx.arrays.items() if k.startswith("keyword_ids"))


def step_sizes(rec: Recorder, st: State, args: argparse.Namespace) -> None:
    """Our file with and without the keyword-id map against marisa-trie's BinaryTrie of the same keywords
    (4-byte big-endian token keys, default options) without and with a packed key id -> input id map."""
    from flashtrie.harness.sweep import marisa_binary_trie

    ks = keywords(rec, st)
    builder = st.builder or choose_builder(args.builder)[0]
    with rec.span("index size vs marisa-trie", backend="marisa-trie") as m:
        if not st.index_path.is_file():
            build_with(builder, ks).save(st.index_path)
        ours = st.index_path.stat().st_size
        if st.idx is None:
            from flashtrie import NarrowLoudsIndex

            st.idx = NarrowLoudsIndex.load(st.index_path, verify=False)
        ours_map = _map_bytes(st.idx)
        t0 = time.perf_counter()
        plain = st.d / "kw_index_ids.ftrie"
        build_with(builder, ks, ids="index").save(plain)
        ours_plain_s = time.perf_counter() - t0
        ours_plain = plain.stat().st_size
        plain.unlink()
        trie, key_s, build_s = marisa_binary_trie(ks)
        path = st.d / "marisa.trie"
        trie.save(str(path))
        theirs, unique = path.stat().st_size, len(trie)
        del trie
        path.unlink()
        their_map = math.ceil(unique * max(1, (len(ks) - 1).bit_length()) / 8)  # key id -> input id, packed
        m.update(ours_bytes=ours, ours_map_bytes=ours_map, ours_no_map_bytes=ours_plain,
                 ours_no_map_build_seconds=round(ours_plain_s, 3), builder=builder, marisa_bytes=theirs,
                 marisa_map_bytes=their_map, marisa_build_seconds=round(build_s, 3),
                 marisa_key_seconds=round(key_s, 3), unique_keywords=unique,
                 ratio_without_map=round(ours_plain / theirs, 4),
                 ratio_with_map=round(ours / (theirs + their_map), 4))
