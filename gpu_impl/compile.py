"""Compile the CUDA kernels with NVRTC (through ``cuda.core.Program``) to a cubin, with a disk cache.

The cubin is built for one architecture (``sm_XY``); PTX is never shipped, because PTX from an NVRTC newer
than the driver does not load.  Options keep IEEE float32 semantics: no fast-math, no flush-to-zero, no
FMA contraction, IEEE division and square root (``docs/semantics.md``).

Every source gets the layout checks of `flashtrie.gpu_impl.layout` appended (``static_assert`` of the
sizes and offsets of the structs the host packs, and a declaration of each of its kernels with the parameters
the host passes), and its headers are found in ``kernels/``.

The cache lives in ``$FLASHTRIE_KERNEL_CACHE`` (the older ``$FLASHTRIE_CACHE`` is still read; default
``~/.cache/flashtrie/kernels``: `flashtrie.caches`); an entry is keyed by the
SHA-256 of every source in ``kernels/``, the architecture, the NVRTC version, the versions of the header and
cuda-core packages, and the exact options handed to NVRTC.  An entry that is not a cubin is compiled again.
"""

from __future__ import annotations

import hashlib
import io
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from flashtrie.errors import DeviceError
from flashtrie.io_util import atomic_write

from .layout import kernel_declarations, static_asserts

__all__ = ["KERNEL_DIR", "CompiledKernel", "compile_kernel", "kernel_source", "cache_dir", "nvrtc_version",
           "spill_report"]

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
#: The kernels and the one entry point each exposes.
KERNELS: dict[str, str] = {"search.cu": "flashtrie_search", "step.cu": "ft_step_mask", "node_flags.cu": "ft_node_flags",
                           "score_mask.cu": "ft_score_mask"}

#: IEEE float32 everywhere: the options every compile passes (and the cache key hashes)
IEEE_OPTIONS = {"std": "c++17", "ftz": False, "prec_div": True, "prec_sqrt": True, "fma": False,
                "use_fast_math": False}
_PACKAGES = ("nvidia-cuda-runtime", "nvidia-cuda-cccl", "nvidia-cuda-nvrtc", "cuda-core", "cuda-bindings")


@dataclass
class CompiledKernel:
    """A compiled cubin, its log, where it came from, and the time spent."""

    name: str
    arch: str
    cubin: bytes
    log: str
    cache_path: Path | None
    from_cache: bool
    seconds: float
    defines: dict[str, str] = field(default_factory=dict)


def cache_dir() -> Path:
    """`flashtrie.caches.kernel_cache_dir`: ``$FLASHTRIE_KERNEL_CACHE`` (or the older ``$FLASHTRIE_CACHE``),
    else ``~/.cache/flashtrie/kernels``."""
    from flashtrie.caches import kernel_cache_dir

    return kernel_cache_dir()


def nvrtc_version() -> tuple[int, int]:
    """The NVRTC library version (major, minor)."""
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:
        raise DeviceError(f"nvrtcVersion failed: {err}")
    return int(major), int(minor)


def _include_paths() -> list[str]:
    from cuda.pathfinder import find_nvidia_header_directory

    paths = [str(KERNEL_DIR)]  # the kernels' own headers
    for lib in ("cudart", "cccl"):
        p = find_nvidia_header_directory(lib)
        if p is None:
            raise DeviceError(f"CUDA headers for {lib!r} not found; install nvidia-cuda-runtime and nvidia-cuda-cccl "
                              "(the 'gpu' extra)")
        paths.append(str(p))
    return paths


def _package_versions() -> str:
    from importlib import metadata

    out = []
    for name in _PACKAGES:
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=none")
    return ",".join(out)


def _options(arch: str, defines: dict[str, str], verbose: bool) -> dict[str, object]:
    """Every option handed to NVRTC except the include paths (which the package versions stand for)."""
    return {**IEEE_OPTIONS, "arch": arch, "define_macro": [(k, v) for k, v in sorted(defines.items())] or None,
            "ptxas_options": ["-v"] if verbose else None}


def kernel_source(file: str) -> str:
    """``kernels/<file>`` with the layout checks and its kernels' declarations appended: what NVRTC compiles."""
    return (KERNEL_DIR / file).read_text() + static_asserts() + kernel_declarations(file)


def _key(source: str, options: dict[str, object]) -> str:
    h = hashlib.sha256(source.encode() + b"\0")
    for src in sorted(KERNEL_DIR.glob("*.cu*")):  # every header the kernel may include
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    h.update(repr(nvrtc_version()).encode())
    h.update(_package_versions().encode())
    h.update(repr(sorted(options.items())).encode())
    return h.hexdigest()[:32]


def compile_kernel(file: str = "search.cu", arch: str = "sm_90", defines: dict[str, str] | None = None, *,
                   use_cache: bool = True, verbose: bool = False) -> CompiledKernel:
    """Compile ``kernels/<file>`` to a cubin for ``arch`` (``sm_80``, ``sm_90``, ...), or load it from the cache.

    ``verbose`` asks ptxas for its resource report (registers, shared memory, spills) in ``log``.
    """
    from cuda.core import Program, ProgramOptions

    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise DeviceError(f"arch: expected 'sm_XY', got {arch!r}")
    defines = {k: str(v) for k, v in (defines or {}).items()}
    path = KERNEL_DIR / file
    source = kernel_source(file)
    options = _options(arch, defines, verbose)
    cpath = cache_dir() / f"{path.stem}-{arch}-{_key(source, options)}.cubin"
    t0 = time.perf_counter()
    if use_cache and cpath.exists():
        cubin = cpath.read_bytes()
        if cubin[:4] == b"\x7fELF":  # else a damaged entry: compile again and replace it
            log_path = cpath.with_suffix(".log")
            log = log_path.read_text() if log_path.exists() else ""
            return CompiledKernel(KERNELS.get(file, path.stem), arch, cubin, log, cpath, True,
                                  time.perf_counter() - t0, defines)
    opts = ProgramOptions(name=path.stem, include_path=[str(KERNEL_DIR), *_include_paths()], **options)
    logs = io.StringIO()
    try:
        prog = Program(source, "c++", opts)
        obj = prog.compile("cubin", logs=logs)
    except Exception as e:  # NVRTC raises with the log in the message
        raise DeviceError(f"NVRTC failed to compile {file} for {arch}: {e}\n{logs.getvalue()}") from e
    cubin = bytes(obj.code)
    seconds = time.perf_counter() - t0
    log = logs.getvalue()
    if use_cache:
        try:
            atomic_write(cpath, cubin)
            atomic_write(cpath.with_suffix(".log"), log.encode())
        except OSError:
            pass  # a read-only home: compile every time
    return CompiledKernel(KERNELS.get(file, path.stem), arch, cubin, log, cpath if use_cache else None, False,
                          seconds, defines)


def spill_report(log: str) -> dict[str, dict[str, int]]:
    """Parse ptxas ``-v`` output: per function, registers, stack frame, spill stores / loads, shared memory."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'|Function properties for (\S+)", line)
        if m:
            current = m.group(1) or m.group(2)
            out.setdefault(current, {})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["registers"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            out[current]["smem"] = int(m.group(1))
    return out
