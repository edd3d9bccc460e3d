"""The import-linter contracts (pyproject.toml) cover every core module: a new module of flashtrie/ is either
in the core's forbidden contract or in a named higher layer, so none escapes the layer check."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: flashtrie/'s modules that are not core: the adapters and the CLI are layers of the layers contract
NOT_CORE = {"__init__", "__main__", "hf", "cli"}


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_core_module_is_in_the_core_contract() -> None:
    core = next(c for c in contracts() if c["type"] == "forbidden")
    listed = set(core["source_modules"])
    here = {p.stem for p in (ROOT / "flashtrie").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    missing = sorted(f"flashtrie.{m}" for m in here - NOT_CORE if f"flashtrie.{m}" not in listed)
    assert not missing, f"add these core modules to the forbidden contract's source_modules: {missing}"


def test_every_higher_layer_is_forbidden_to_the_core() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    core = next(c for c in contracts() if c["type"] == "forbidden")
    assert named <= set(core["forbidden_modules"])
    assert {"flashtrie.cli", "flashtrie.harness", "flashtrie.hf", "flashtrie.datasets", "flashtrie.reference_cpu",
            "flashtrie.gpu_impl"} <= named
