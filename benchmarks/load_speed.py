"""Verified-load speed of index files: ``flashtrie.harness.load_speed`` (see its help), kept at this path.

    python benchmarks/load_speed.py FILE... [--workers 1,2,16] [--repeats 3] [--json OUT] [--prepare N]
"""

from __future__ import annotations

from flashtrie.harness.load_speed import main

if __name__ == "__main__":
    raise SystemExit(main())
