"""Index file sizes (with and without the keyword-id map) against marisa-trie, load speed, and estimates of
further layout savings.  Prints one JSON object; docs/index-format.md ("Size") quotes its output.

    python benchmarks/index_sizes.py data/kw10m.npz [--marisa] [--load-repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
from flashtrie.datasets.io import load_keywords

from flashtrie import NarrowLoudsIndex


def _best(f, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _estimates(ix: NarrowLoudsIndex) -> dict[str, float]:
    """Bytes the layout changes of docs/index-format.md would save on this index (measured on its arrays)."""
    m, universe = ix.link_starts.size, max(ix.suffix.size, 1)
    ef_bits = m * (2 + max(0, math.ceil(math.log2(universe / m)))) + 64 * (m // 512 + 2)  # + sampled select
    suffix = ix.suffix.to_array()
    high = int(np.count_nonzero(suffix >= 1 << 16))
    hi_bits = max(1, int(suffix.max() >> 16).bit_length()) if high else 0
    split_suffix = ix.suffix.size * 2 + ix.suffix.size / 8 * 1.25 + high * hi_bits / 8
    return {
        "elias_fano_link_starts_saves": ix.link_starts.nbytes - ef_bits / 8,
        "split_suffix_16_bit_low_saves": ix.suffix.nbytes - split_suffix,
        "suffix_tokens_over_16_bits": high / max(ix.suffix.size, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("keywords")
    ap.add_argument("--marisa", action="store_true", help="also build marisa-trie's BinaryTrie")
    ap.add_argument("--load-repeats", type=int, default=3)
    args = ap.parse_args()
    ks = load_keywords(args.keywords).keywords
    out: dict = {"keywords": len(ks), "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="flashtrie-sizes-") as d:
        for ids in ("input", "index"):
            t = time.perf_counter()
            ix = NarrowLoudsIndex.build(ks, ids=ids)
            build_s = time.perf_counter() - t
            path = os.path.join(d, f"{ids}.ftrie")
            ix.save(path)
            size = os.path.getsize(path)
            s = ix.stats()
            rec = {"build_s": round(build_s, 2), "file_bytes": size, "file_bytes_per_keyword": size / ix.num_unique,
                   "id_map_bytes": s["id_map_bytes"], "id_map_bits": s["id_map_bits"], "arrays": s["arrays"],
                   "nodes": ix.num_nodes, "unique": ix.num_unique}
            for label, kw in (("verify", {}), ("no_verify", {"verify": False}), ("verify_copy", {"copy": True})):
                sec = _best(lambda kw=kw, path=path: NarrowLoudsIndex.load(path, **kw), args.load_repeats)
                rec[f"load_{label}_s"] = round(sec, 4)
                rec[f"load_{label}_GBps"] = round(size / sec / 1e9, 3)
            out[ids] = rec
            if ids == "index":
                out["estimates"] = _estimates(ix)
            del ix
    if args.marisa:
        import marisa_trie

        be = ks.tokens.astype(">u4").tobytes()
        off = (ks.offsets * 4).tolist()
        t = time.perf_counter()
        trie = marisa_trie.BinaryTrie([be[a:b] for a, b in zip(off[:-1], off[1:], strict=True)])
        build_s = time.perf_counter() - t
        with tempfile.TemporaryDirectory(prefix="flashtrie-sizes-") as d:
            trie.save(os.path.join(d, "m"))
            size = os.path.getsize(os.path.join(d, "m"))
        u = len(trie)
        map_bytes = math.ceil(u * max(1, (len(ks) - 1).bit_length()) / 8)  # marisa key id -> input id, packed
        out["marisa"] = {"build_s": round(build_s, 2), "file_bytes": size, "file_bytes_per_keyword": size / u,
                         "id_map_bytes": map_bytes, "with_map_bytes_per_keyword": (size + map_bytes) / u}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
