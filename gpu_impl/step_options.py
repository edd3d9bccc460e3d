"""The construction options of `GpuTrieStepper` and their checks: mask chunk, table sizes, kernel macros."""

from __future__ import annotations

from typing import Any

import numpy as np

from flashtrie.errors import InputError

__all__ = ["THREADS", "CHUNK", "CHILD_TABLE", "ROOT_TABLE", "DEFINES", "check_options", "check_defines"]

THREADS = 256
CHUNK = 4096  # default vocabulary entries per mask chunk (kernels/step.cu's FT_STEP_CHUNK)
#: nodes whose child ranges the default child table holds (8 bytes each: 16 MiB at most); in level order these
#: are the nodes nearest the root, where most decode rows are
CHILD_TABLE = 1 << 21
#: root labels whose child the default root table holds, with that child's decoded state (32 bytes a label: 128
#: MiB at most, 1 MiB at V = 32,768); a row at the root then finds its next state in one load
ROOT_TABLE = 1 << 22
#: the macros of kernels/step.cu a caller may set (`GpuTrieStepper(defines=...)`); FT_STEP_CHUNK comes from `chunk`
DEFINES = ("FT_STEP_THREADS",)


def check_options(chunk: Any, child_table: Any, root_table: Any) -> None:
    """``chunk`` a power of two in [1024, 65536]; the table sizes non-negative integers."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1024 <= chunk <= 65536 or chunk & (chunk - 1):
        raise InputError(f"chunk: expected a power of two in [1024, 65536], got {chunk!r}")
    for name, val in (("child_table", child_table), ("root_table", root_table)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise InputError(f"{name}: expected a non-negative integer, got {val!r}")


def check_defines(defines: dict[str, Any] | None) -> dict[str, str]:
    """``defines`` as macro strings, refused where the host's launches would not match the kernels."""
    if defines is None:
        return {}
    if not isinstance(defines, dict):
        raise InputError(f"defines: expected a dict of macro names to values, got {type(defines).__name__}")
    out = {str(k): str(v) for k, v in defines.items()}
    if "FT_STEP_CHUNK" in out:
        raise InputError("defines: FT_STEP_CHUNK is set through chunk=..., which the host's chunking follows")
    unknown = sorted(set(out) - set(DEFINES))
    if unknown:
        raise InputError(f"defines: unknown macro(s) {unknown}; kernels/step.cu reads {list(DEFINES)}")
    t = out.get("FT_STEP_THREADS")
    if t is not None and not (t.isdigit() and 64 <= int(t) <= 512 and int(t) % 32 == 0):
        raise InputError(f"defines: FT_STEP_THREADS must be a multiple of 32 in [64, 512], got {t!r}")
    return out
