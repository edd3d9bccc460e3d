"""search.cu compiled for this device on first use, then loaded from the kernel cache (`check.sh compile`).

    python3 tools/probes/compile_check.py
"""

from __future__ import annotations

from cuda.core import Device
from flashtrie.gpu_impl.compile import compile_kernel, spill_report


def main() -> None:
    d = Device(0)
    d.set_current()
    cc = d.compute_capability
    cc = cc() if callable(cc) else cc
    arch = f"sm_{cc.major}{cc.minor}"
    k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"}, use_cache=False, verbose=True)
    print(f"compile {arch}: first use {k.seconds:.2f} s, resources {spill_report(k.log)}")
    k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"})
    print(f"cached load {k.seconds * 1e3:.1f} ms (from_cache={k.from_cache})")


if __name__ == "__main__":
    main()
