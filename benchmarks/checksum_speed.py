"""CRC-32 verification speed of a 1 GiB file in the index container format, at 1 and all threads.

    python benchmarks/checksum_speed.py [DIR]     (writes and removes DIR/checksum-bench.ftrie)
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from flashtrie.cpus import usable_cpus
from flashtrie.index import fileformat


def main() -> None:
    path = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "checksum-bench.ftrie")
    a = np.random.default_rng(0).integers(0, 2**63, size=(1 << 30) // 8, dtype=np.uint64)
    fileformat.write_index_file(path, {"big": a}, {})
    del a
    try:
        size = os.path.getsize(path)
        for copy in (False, True):
            t = time.perf_counter()
            f = fileformat.read_index_file(path, {"big": "uint64"}, copy=copy)
            opened = time.perf_counter() - t
            for workers in sorted({1, usable_cpus()}):
                best = np.inf
                for _ in range(3):
                    t = time.perf_counter()
                    f.verify(workers)
                    best = min(best, time.perf_counter() - t)
                print(f"{'copied' if copy else 'mapped'} (open {size / opened / 1e9:.2f} GB/s), "
                      f"{workers} thread(s): verify {size / best / 1e9:.2f} GB/s")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
