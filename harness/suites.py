"""The lab's registries of suites.

* `SUITES`, the report pipeline's: each suite of the lab (the search sweeps, the stepwise suite, the scale
  pipeline, the real libraries, quality) registers the records it owns, its report sections, its figures and a
  table of its metrics (name -> description, unit, and how to read it from a record).
* `COMMANDS`, the measurements' entry points: ``flashtrie bench NAME ARGS...`` runs the ``main(ARGS)`` of a
  registered module (the stepwise suite, the scale pipeline ...), which writes records for the report pipeline.
  The search sweeps (``bench beam|batch|size|build|quality|all``) are the command's own."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .records import Record

__all__ = ["Metric", "Page", "Suite", "SUITES", "register", "no_figures", "suite_of", "Command", "COMMANDS",
           "register_command"]


@dataclass(frozen=True)
class Metric:
    """One metric of a suite; ``function`` reads it from a record (None: the stored metric of that name)."""

    description: str
    unit: str
    function: Callable[[Record], Any] | None = None

    def value(self, name: str, r: Record) -> Any:
        return self.function(r) if self.function is not None else r.metrics.get(name)


@dataclass(frozen=True)
class Page:
    """What a suite's sections are rendered for: the record files, the report's folder, the figures drawn
    there (name -> [png, svg]) and, where given by hand, the commit the records were measured at."""

    sources: list[str]
    out_dir: Path
    drawn: dict[str, list[Path]] = field(default_factory=dict)
    commit: str | None = None


@dataclass(frozen=True, eq=False)
class Suite:
    """A suite of the lab as the report pipeline sees it (suites own disjoint records)."""

    name: str
    title: str  # the report's title when the records are this suite's only
    owns: Callable[[Record], bool]
    sections: Callable[[list[Record], Page], list[str]]  # Markdown lines, after the report's title
    figures: Callable[[list[Record], Path], dict[str, list[Path]]]  # drawn into the folder given
    metrics: Mapping[str, Metric]
    fallback: bool = False  # owns only the records no other suite owns


def no_figures(records: list[Record], out_dir: Path) -> dict[str, list[Path]]:
    """`Suite.figures` of a suite that draws none."""
    return {}


#: Registered suites, in the order their sections appear in a report.
SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    """Add ``suite`` to the registry (once per name)."""
    SUITES[suite.name] = suite
    return suite


def suite_of(r: Record) -> Suite | None:
    """The suite that owns ``r``: a suite that is no fallback first, in the registry's order."""
    ranked = sorted(SUITES.values(), key=lambda s: s.fallback)
    return next((s for s in ranked if s.owns(r)), None)


@dataclass(frozen=True)
class Command:
    """A measurement reached as ``flashtrie bench NAME ARGS...``: ``module.main(ARGS)`` (imported when run)."""

    name: str
    module: str  # a module of the lab with ``main(argv: list[str]) -> int``, or ``module:function``
    help: str  # one line for ``flashtrie bench --help``

    def run(self, argv: Sequence[str]) -> int:
        """Run the measurement with ``argv`` (its own options, ``--help`` included); its exit status."""
        module, _, function = self.module.partition(":")
        main: Callable[[list[str]], int | None] = getattr(importlib.import_module(module), function or "main")
        return int(main(list(argv)) or 0)


#: Registered measurement commands, by name (names other than the search sweeps').
COMMANDS: dict[str, Command] = {}


def register_command(name: str, module: str, help: str) -> Command:
    """Add ``flashtrie bench NAME`` (once per name)."""
    COMMANDS[name] = Command(name, module, help)
    return COMMANDS[name]


register_command("stepwise", "flashtrie.harness.stepwise.run",
                 "the stepwise API per decoding step: mask, advance, the processor and generate() (render: report)")
register_command("scale", "flashtrie.harness.scale.pipeline",
                 "the scale pipeline: curve sizes then N, prepare and serve each, under one time budget")
register_command("scale-step", "flashtrie.harness.scale.stages",
                 "one process of the scale pipeline (prepare, serve, gen, build, ...), its table or render")
register_command("smoke", "flashtrie.harness.device_probes:smoke_main",
                 "GPU == numpy bit for bit in eight configurations on a generated library")
register_command("upload", "flashtrie.harness.device_probes:upload_main",
                 "an index file loaded (verified, trusted) and uploaded: seconds, GB/s, bytes per keyword")
register_command("load", "flashtrie.harness.device_probes:load_main",
                 "verified loads of index files at several CPU counts: seconds, GB/s, the split into steps")
register_command("compile", "flashtrie.harness.device_probes:compile_main",
                 "search.cu compiled for this device on first use, then loaded from the kernel cache")
register_command("launch", "flashtrie.harness.launch_probe",
                 "where the host's microseconds of one fused step go: each part timed alone, the launch paths")
register_command("query-passes", "flashtrie.harness.query_passes",
                 "the query generator's library pass on the CPU and the GPU: seconds, facts equal bit for bit")
register_command("numpylazy", "flashtrie.harness.numpy_lazy",
                 "the lazy numpy reference at scale: set-up, memory, its searches' seconds, GPU == numpy")
register_command("gpubuild", "flashtrie.harness.gpu_build_probe",
                 "the GPU builder: a build's stages and memory, CPU == GPU, copy bandwidths, the directories' set-up")
register_command("step-probe", "flashtrie.harness.step_probe",
                 "where a fused step's device time goes: floors on its grid, each kernel, variants (or ncu launches)")
