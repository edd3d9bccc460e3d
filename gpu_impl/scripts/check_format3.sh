#!/bin/bash
# Index format 3 on the device (from the repository root, the project installed): the GPU tests, then a 10M
# library built, saved, loaded, uploaded (upload seconds and host-to-device GB/s from GpuSearcher.upload_stats)
# and benchmarked (`flashtrie bench beam`, gpu + numpy, beams 100 and 1000, batch 1, parity checked).
# About 2 minutes (the GPU tests take most of it). Compare the bench lines with an earlier run of the
# same bench on format 2 (e.g. gpu_impl/scripts/device_check.sh logs) for latency against the old layout.
# Details go to $OUT/format3/ (default ./out/format3) and into $OUT/format3.tgz; a summary is printed at the end.
#   N=10M  library size      TESTS="tests"  what pytest runs (-m gpu)
set -uo pipefail
OUT=${OUT:-$PWD/out}
D="$OUT/format3"
mkdir -p "$D"
export PYTHONUNBUFFERED=1
export FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
W=$(mktemp -d)
N=${N:-10M}
t_start=$(date +%s)

timeout ${TESTS_TIMEOUT:-240} python3 -m pytest -q -m gpu -p no:cacheprovider ${TESTS:-tests} > "$D/pytest.log" 2>&1
rc_tests=$?

timeout 120 bash -c "set -e
  flashtrie gen-keywords -n $N -o $W/kw.npz --quiet
  flashtrie gen-queries $W/kw.npz -n 8 -K 1000 --preset dense -o $W/q.npz --quiet
  flashtrie build $W/kw.npz -o $W/kw.ftrie --ids index --quiet" > "$D/build.log" 2>&1
rc_build=$?

timeout 90 python3 - "$W/kw.ftrie" "$D/upload.json" > "$D/upload.log" 2>&1 <<'PY'
import json, sys, time
from flashtrie import NarrowLoudsIndex
from flashtrie.gpu_impl import GpuSearcher
path, out = sys.argv[1], sys.argv[2]
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
json.dump(recs, open(out, "w"), indent=1)
PY
rc_upload=$?

timeout 150 flashtrie bench beam --index "$W/kw.ftrie" --queries "$W/q.npz" --backends gpu,numpy --beams 100,1000 \
  --batch-size 1 --repeats 10 --max-seconds 8 --quiet -o "$D/bench.jsonl" > "$D/bench.log" 2>&1
rc_bench=$?
rm -rf "$W"

echo "== check_format3 ($(( $(date +%s) - t_start )) s): tests rc=$rc_tests build rc=$rc_build upload rc=$rc_upload bench rc=$rc_bench"
grep -E "passed|failed|error" "$D/pytest.log" | tail -3
grep -E "^FAILED|^ERROR" "$D/pytest.log" | head -10
tail -3 "$D/build.log"
cat "$D/upload.log" | tail -4
grep -E "^kind|^---|^latency" "$D/bench.log"
tar -czf "$OUT/format3.tgz" -C "$OUT" format3 2>/dev/null  # the details in one file (few files come back)
for rc in $rc_tests $rc_build $rc_upload $rc_bench; do [[ $rc == 0 ]] || exit 1; done
exit 0
