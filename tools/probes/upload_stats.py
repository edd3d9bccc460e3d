"""Load and upload of one index file on the GPU: load seconds (verified, then trusted), GpuSearcher set-up,
the upload's copy seconds and host-to-device GB/s, the flags derived on the device, bytes per keyword.

    python3 tools/probes/upload_stats.py INDEX.ftrie OUT.json
"""

from __future__ import annotations

import json
import sys
import time

from flashtrie.gpu_impl import GpuSearcher

from flashtrie import NarrowLoudsIndex


def main(argv: list[str]) -> int:
    path, out = argv
    recs = []
    for verify in (True, False):  # verified (pages in the page cache after the checksums), then trusted
        t0 = time.perf_counter()
        ix = NarrowLoudsIndex.load(path, verify=verify)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        g = GpuSearcher(ix)
        t_new = time.perf_counter() - t0
        st = g.upload_stats
        rec = {"verify": verify, "load_s": round(t_load, 3), "searcher_s": round(t_new, 3), **st.as_dict(),
               "file_bytes": sum(a.nbytes for a in ix.arrays.values()), "nodes": ix.num_nodes,
               "bytes_per_keyword": round(ix.stats()["bytes_per_keyword_without_id_map"], 3)}
        recs.append(rec)
        print(f"load verify={verify} {t_load:.2f} s; upload {st.seconds:.3f} s: {st.bytes / 1e6:.1f} MB copied in "
              f"{st.copy_seconds:.3f} s = {st.gb_per_s:.2f} GB/s, flags derived on the device in "
              f"{st.derive_seconds * 1e3:.2f} ms; {rec['bytes_per_keyword']} B/keyword")
        del g
    with open(out, "w") as f:
        json.dump(recs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
