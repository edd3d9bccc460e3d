"""What the steps of one scale process share: the `State` (files, and what earlier steps made), its inputs read
on first use, and the exit statuses."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .recorder import Recorder

__all__ = ["EXIT_FAILED", "EXIT_MISMATCH", "EXIT_NO_TIME", "State", "index", "keyword_bytes", "keywords",
           "reference", "step_load", "workload"]

EXIT_MISMATCH, EXIT_FAILED, EXIT_NO_TIME = 3, 4, 5


@dataclass
class State:
    """What the steps of one process share."""

    d: Path
    ks: Any = None  # KeywordSet
    wl: Any = None  # QueryWorkload
    idx: Any = None  # NarrowLoudsIndex
    gpu: Any = None  # GpuSearcher
    ref: Any = None  # NumpySearcher (made once, shared; eager up to its EAGER_MAX_NODES, else lazy)
    no_gpu: str | None = None  # why the GPU steps are skipped
    builder: str | None = None  # "gpu" | "cpu", chosen by the warm-up step
    no_gpu_builder: str | None = None  # why the GPU builder is not used

    @property
    def kw_path(self) -> Path:
        return self.d / "kw.npz"

    @property
    def index_path(self) -> Path:
        return self.d / "kw.ftrie"

    @property
    def queries_path(self) -> Path:
        return self.d / "q.npz"



def keyword_bytes(ks: Any) -> int:
    return int(ks.tokens.nbytes + ks.offsets.nbytes)


def keywords(rec: Recorder, st: State) -> Any:
    """The keywords of this process, read from ``kw.npz`` the first time a step needs them."""
    if st.ks is None:
        from flashtrie.datasets import load_keywords

        st.ks = rec.timed("load keywords", lambda: load_keywords(st.kw_path).keywords, nbytes=keyword_bytes)
    return st.ks


def workload(st: State) -> Any:
    if st.wl is None:
        from flashtrie.datasets import load_workload

        st.wl = load_workload(st.queries_path)
    return st.wl


def index(rec: Recorder, st: State) -> Any:
    if st.idx is None:
        step_load(rec, st, None)
    return st.idx


def reference(rec: Recorder, st: State) -> Any:
    """The numpy reference searcher of the index, made (and timed) on first use: ``decode="auto"`` decodes
    every node up front on small indexes, only the nodes each search reaches on large ones (the record
    says which)."""
    if st.ref is None:
        from flashtrie.reference_cpu.numpy_search import NumpySearcher

        idx = index(rec, st)
        with rec.span("numpy searcher", backend="numpy") as m:
            st.ref = NumpySearcher(idx)
            m.update(nodes=int(idx.num_nodes), decode=st.ref.decode)
    return st.ref



def step_load(rec: Recorder, st: State, args: argparse.Namespace | None) -> None:
    from flashtrie import NarrowLoudsIndex

    size = st.index_path.stat().st_size
    split: dict[str, float] = {}  # seconds per check (`NarrowLoudsIndex.load`'s ``timings``), filled by the record
    st.idx = rec.timed("load index (verify)", lambda: NarrowLoudsIndex.load(st.index_path, verify=True,
                                                                             timings=split),
                       nbytes=lambda _: size, split=split)

