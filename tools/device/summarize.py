"""Short tables of the device checks' result files (tools/device/check.sh) that no report section shows: the
scale pipeline's query stage split and the compare check's rounds (the suites' records render through
`flashtrie report`).

    python3 tools/device/summarize.py queries SCALE.jsonl
    python3 tools/device/summarize.py compare DIR
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any


def _lines(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def queries(path: str) -> None:
    """The query stage's split (the scale pipeline's records)."""
    for r in _lines(path):
        split = r["metrics"].get("split")
        if split:
            print(f"queries {r['metrics']['seconds']:.2f} s: " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))


def _compare_row(tree: str, n: int, r: dict[str, Any]) -> str:
    m, c = r.get("metrics", {}), r.get("config", {})
    dev = m.get("device_mean_ms")
    parts = "/".join(f"{m[k]:.3f}" for k in ("host_prep_ms", "host_enqueue_ms", "host_wait_ms", "host_post_ms")
                     if k in m)
    return (f"{tree:5} {n:>5} {c.get('beam_width')!s:>5} {r.get('status', '?'):9} "
            f"{m.get('mean_ms', float('nan')):8.3f} {m.get('p99_ms', float('nan')):8.3f} "
            f"{dev if dev is None else round(dev, 3)!s:>9} {parts:>24}")


def compare(folder: str) -> None:
    """Both trees' GPU latencies (bench_base.jsonl, bench_new.jsonl in ``folder``) and fused steps
    (step_base.jsonl, step_new.jsonl), round by round."""
    print(f"{'tree':5} {'round':>5} {'beam':>5} {'status':9} {'mean ms':>8} {'p99 ms':>8} {'device ms':>9} "
          f"{'prep/enq/wait/post ms':>24}")
    for tree in ("base", "new"):
        path = os.path.join(folder, f"bench_{tree}.jsonl")
        if not os.path.exists(path):
            continue
        seen: dict[Any, int] = {}
        for r in _lines(path):
            if r.get("backend") != "gpu" or r.get("kind") not in (None, "search", "beam", "latency"):
                continue
            key = r.get("config", {}).get("beam_width")
            seen[key] = seen.get(key, 0) + 1
            print(_compare_row(tree, seen[key], r))
    print(f"{'tree':5} {'round':>5} {'step rows':>14} {'device us fused':>16} {'10 per graph':>13} {'host us p50':>12}")
    for tree in ("base", "new"):
        path = os.path.join(folder, f"step_{tree}.jsonl")
        for r in _lines(path) if os.path.exists(path) else []:
            m, c = r.get("metrics", {}), r.get("config", {})
            if r.get("status") != "ok" or "graph_fused_us" not in m:
                continue
            inner = next((v for k, v in m.items() if k.startswith("graph") and k.endswith("_fused_us")
                          and k != "graph_fused_us"), float("nan"))
            host = m.get("host_fused_us", {})
            commit = str((r.get("env", {}).get("git") or {}).get("commit", ""))
            print(f"{tree:5} {commit[-6:]:>5} {c.get('states', ''):>14} {_num(m['graph_fused_us']):>16.2f} "
                  f"{_num(inner):>13.2f} {_num(host, 'p50'):>12.1f}")


def _num(v: Any, stat: str = "mean") -> float:
    """A metric as a number: itself, or one statistic of a distribution."""
    return float(v.get(stat, float("nan"))) if isinstance(v, dict) else float(v)


COMMANDS: dict[str, Callable[[str], None]] = {"queries": queries, "compare": compare}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](sys.argv[2])
