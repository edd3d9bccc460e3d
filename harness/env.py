"""Environment snapshot stored with every record: a number without its machine cannot be compared later."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["snapshot", "cpu_model", "gpu_info", "git_state", "package_versions", "summary_line"]

_PACKAGES = ("flashtrie", "numpy", "scipy", "marisa-trie", "cuda-core", "cuda-bindings", "nvidia-cuda-nvrtc")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, ``platform`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_bytes() -> int | None:
    """Total physical memory in bytes, or None when unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that change the numbers (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["nvrtc"] = _nvrtc_version()
    return out


def _nvrtc_version() -> str | None:
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}" if int(err) == 0 else None
    except Exception:  # noqa: BLE001 - any failure just means "unknown"
        return None


def gpu_info() -> list[dict[str, Any]]:
    """Name, compute capability, memory and driver version of every visible GPU; [] without one."""
    try:
        from cuda.bindings import driver
    except Exception:  # noqa: BLE001
        return []
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return []
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return []
        err, drv = driver.cuDriverGetVersion()
        driver_version = f"{drv // 1000}.{(drv % 1000) // 10}" if int(err) == 0 else None
        release = _driver_release()
        gpus = []
        for i in range(count):
            _, dev = driver.cuDeviceGet(i)
            _, raw = driver.cuDeviceGetName(256, dev)
            name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
            _, mem = driver.cuDeviceTotalMem(dev)
            attr = driver.CUdevice_attribute
            _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            _, sms = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
            gpus.append({"index": i, "name": name, "compute_capability": f"{major}.{minor}",
                         "memory_bytes": int(mem), "multiprocessors": int(sms), "driver": driver_version,
                         "driver_release": release})
        return gpus
    except Exception:  # noqa: BLE001
        return []


def _driver_release() -> str | None:
    """The NVIDIA kernel driver's release (e.g. 580.159.04), from /proc or nvidia-smi."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        for word in text.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def git_state(root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Commit hash and dirty flag of the source tree flashtrie runs from.

    ``FLASHTRIE_COMMIT``, when set, names the commit the tree was copied from (a copied working tree, as on
    the device machine, whose own git metadata may be missing or stale) and wins; otherwise git is asked,
    and outside a checkout both are None.  Changes under ``reports/`` (the outputs of a report run) do not
    count as dirty.
    """
    given = os.environ.get("FLASHTRIE_COMMIT")
    if given:
        return {"commit": given, "dirty": None, "source": "FLASHTRIE_COMMIT"}
    where = Path(root) if root is not None else Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    # generated reports are rewritten while a report run goes on; only changes elsewhere make numbers dirty
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)reports")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def snapshot(argv: list[str] | None = None) -> dict[str, Any]:
    """Everything about this machine and run that a stored number depends on (JSON-serialisable)."""
    uname = platform.uname()
    return {
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "hostname": uname.node,
        "os": f"{uname.system} {uname.release}",
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "ram_bytes": ram_bytes(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "gpus": gpu_info(),
        "git": git_state(),
        "command": list(sys.argv if argv is None else argv),
    }


def summary_line(env: dict[str, Any]) -> str:
    """One line for tables and figure captions: CPU, cores, GPU, commit."""
    gpus = env.get("gpus") or []
    gpu = ", ".join(g.get("name", "?") for g in gpus) if gpus else "no GPU"
    git = env.get("git") or {}
    commit = (git.get("commit") or "unknown")[:10] + ("+dirty" if git.get("dirty") else "")
    return f"{env.get('cpu', '?')} ({env.get('cpu_cores', '?')} cores), {gpu}, commit {commit}"
