"""The structs the host hands the kernels, described once: `PARAMS` and `INDEX_VIEW` (the search kernel
reads them from device memory) and `STEP_TABLES`, `STEP_ROWS`, `STEP_MASK` (the step kernels' parameters
after the view, passed by value).

Each is a table of ``(name, ctype)`` rows in the field order of ``kernels/params.cuh``, ``kernels/index.cuh``
and ``kernels/step_params.cuh``.  From the table come the `struct` format the host packs with (`CStruct.pack`)
and the C++ ``static_assert`` lines (`CStruct.static_asserts`) that `compile_kernel` appends to every
kernel source, so a struct that drifts from its table fails to compile.

`KERNEL_PARAMS` lists every kernel the host launches with its parameters: `KernelParams.pack` lays out a launch's
parameters by name, and the declaration of each kernel appended to its source fails to compile unless the
kernel takes exactly those (`kernel_declarations`).  `CONSTANTS` and `STAT_COLUMNS` are the values the host
and the kernels share (error bits, hypothesis kinds, the absent node, the step counters); the kernels read
them from ``kernels/constants.cuh``, generated from these tables (`write_constants_header`).
"""

from __future__ import annotations

import keyword
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

__all__ = ["CStruct", "KernelParams", "PARAMS", "INDEX_VIEW", "STEP_TABLES", "STEP_ROWS", "STEP_MASK",
           "STRUCTS", "KERNEL_PARAMS", "CONSTANTS", "STAT_COLUMNS", "static_asserts", "kernel_declarations",
           "constants_header", "write_constants_header"]

#: struct format character, size (= alignment) of every C type the tables use; any pointer is "ptr"
_CTYPES: dict[str, str] = {"ptr": "Q", "u64": "Q", "i64": "q", "u32": "I", "float": "f"}


@dataclass(frozen=True)
class CStruct:
    """A C struct of scalar fields and pointers, laid out with natural alignment (little-endian)."""

    name: str
    fields: tuple[tuple[str, str], ...]
    #: macro the struct's header defines: the checks apply only where that header was included
    guard: str = ""

    def __post_init__(self) -> None:
        names = [n for n, _ in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate field names")
        if not all(n.isidentifier() and not keyword.iskeyword(n) for n in [self.name, *names]):
            raise ValueError(f"{self.name}: a struct or field name that is not an identifier")
        bad = [t for _, t in self.fields if t not in _CTYPES]
        if bad:
            raise ValueError(f"{self.name}: unknown field types {bad}; known: {sorted(_CTYPES)}")

    @cached_property
    def offsets(self) -> dict[str, int]:
        """Byte offset of every field."""
        out, pos = {}, 0
        for name, ctype in self.fields:
            size = struct.calcsize(_CTYPES[ctype])
            pos = -(-pos // size) * size
            out[name] = pos
            pos += size
        return out

    @cached_property
    def size(self) -> int:
        """sizeof: the end of the last field rounded up to the largest alignment."""
        if not self.fields:
            return 0
        align = max(struct.calcsize(_CTYPES[t]) for _, t in self.fields)
        name, ctype = self.fields[-1]
        end = self.offsets[name] + struct.calcsize(_CTYPES[ctype])
        return -(-end // align) * align

    @cached_property
    def format(self) -> str:
        """The `struct` format of the whole struct, padding bytes included."""
        parts, pos = ["<"], 0
        for name, ctype in self.fields:
            off = self.offsets[name]
            if off > pos:
                parts.append(f"{off - pos}x")
            parts.append(_CTYPES[ctype])
            pos = off + struct.calcsize(_CTYPES[ctype])
        if self.size > pos:
            parts.append(f"{self.size - pos}x")
        return "".join(parts)

    def pack(self, values: Mapping[str, int | float]) -> bytes:
        """The struct's bytes; ``values`` names every field exactly once."""
        try:
            if len(values) != len(self.fields):
                raise KeyError
            return struct.pack(self.format, *[values[n] for n, _ in self.fields])
        except KeyError:
            missing = [n for n, _ in self.fields if n not in values]
            extra = [n for n in values if n not in self.offsets]
            raise ValueError(f"{self.name}: missing fields {missing}, unknown fields {extra}") from None

    def packer(self, *names: str) -> Callable[..., bytes]:
        """A packer of the struct's bytes from keyword values of the fields ``names`` (any order; each value
        given by its field's name), every other field 0: the parameters of a kernel that reads only those."""
        return _keyword_packer(self, names)

    def static_asserts(self) -> str:
        """C++ lines that fail to compile unless the struct has this table's size and offsets."""
        lines = [f'static_assert(sizeof({self.name}) == {self.size}, "{self.name}: sizeof differs from '
                 f'gpu_impl/layout.py");']
        for name, off in self.offsets.items():
            lines.append(f'static_assert(FT_OFFSETOF({self.name}, {name}) == {off}, '
                         f'"{self.name}.{name}: offset differs from gpu_impl/layout.py");')
        body = "\n".join(lines) + "\n"
        return f"#ifdef {self.guard}\n{body}#endif\n" if self.guard else body


def _keyword_packer(cstruct: CStruct, names: tuple[str, ...]) -> Callable[..., bytes]:
    """`CStruct.packer`: a function of keyword-only parameters, one per field packed (generated, as
    dataclasses generate ``__init__``), so the interpreter refuses a missing or unknown name at no cost per
    call; ``names`` attribute: the fields, in the table's order."""
    unknown = [n for n in names if n not in cstruct.offsets]
    if unknown or len(set(names)) != len(names) or not names:
        raise ValueError(f"{cstruct.name}: unknown fields {unknown}, a field named twice or none in {list(names)}")
    ordered = tuple(n for n, _ in cstruct.fields if n in names)
    parts, pos = ["<"], 0
    for name in ordered:
        code = _CTYPES[dict(cstruct.fields)[name]]
        off = cstruct.offsets[name]
        if off > pos:
            parts.append(f"{off - pos}x")
        parts.append(code)
        pos = off + struct.calcsize(code)
    if cstruct.size > pos:
        parts.append(f"{cstruct.size - pos}x")
    return _generated(cstruct.name, ordered, "".join(parts))


def _generated(name: str, args: tuple[str, ...], fmt: str) -> Callable[..., bytes]:
    """``def name(*, args...): return struct.pack(fmt, args...)``, with ``names`` = ``args``."""
    if not all(a.isidentifier() and not keyword.iskeyword(a) for a in (name, *args)):
        raise ValueError(f"{name}: a name that is not an identifier in {list(args)}")
    text = ", ".join(args)
    scope: dict[str, Any] = {"_pack": struct.Struct(fmt).pack}
    exec(f"def {name}(*, {text}):\n    return _pack({text})\n", scope)  # noqa: S102 - identifiers from a table
    fn = scope[name]
    fn.names = args
    return cast(Callable[..., bytes], fn)


@dataclass(frozen=True)
class KernelParams:
    """A kernel's entry point in its source file and its parameters in order, each a C scalar (``u64``,
    ``u32`` or a pointer ``T*``) or a struct passed by value (a `CStruct`).

    `pack` lays them out for the driver (each at a multiple of 8 bytes); `declaration` is the C++ declaration
    `compile_kernel` appends to the source, which fails to compile unless the kernel has these parameters."""

    name: str
    file: str
    params: tuple[tuple[str, str | CStruct], ...]

    @staticmethod
    def _size(kind: str | CStruct) -> int:
        if isinstance(kind, CStruct):
            return kind.size
        return 8 if kind.endswith("*") else struct.calcsize(_CTYPES[kind])

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """Where each parameter starts in the packed parameters."""
        out, pos = [], 0
        for _, kind in self.params:
            out.append(pos)
            pos += -(-self._size(kind) // 8) * 8
        return tuple(out)

    @cached_property
    def size(self) -> int:
        """Bytes of the packed parameters."""
        return self.offsets[-1] + -(-self._size(self.params[-1][1]) // 8) * 8 if self.params else 0

    def pack(self, **values: int | bytes) -> bytes:
        """The parameters, or (fewer values) the leading ones: each named once, in the kernel's order; a scalar
        as a number, a struct as its bytes (`CStruct.pack`, `CStruct.packer`)."""
        names = [n for n, _ in self.params]
        if list(values) != names[: len(values)]:
            raise ValueError(f"{self.name}: expected the parameters {names} (or the first of them) in that order, "
                             f"got {list(values)}")
        out = bytearray()
        for (name, kind), off in zip(self.params, self.offsets, strict=False):
            if name not in values:
                break
            v = values[name]
            out += bytes(off - len(out))
            if isinstance(kind, CStruct):
                if not isinstance(v, (bytes, bytearray)) or len(v) != kind.size:
                    raise ValueError(f"{self.name}: parameter {name} expected {kind.size} bytes of {kind.name}")
                out += v
            else:
                assert not isinstance(v, (bytes, bytearray)), f"{self.name}: parameter {name} is a number"
                out += struct.pack("<Q" if kind.endswith("*") else "<" + _CTYPES[kind], int(v))
        return bytes(out) + bytes(-len(out) % 8)

    def packer(self) -> Callable[..., bytes]:
        """A packer of every parameter by keyword, as fast as `struct.pack` (generated like
        `CStruct.packer`): for a kernel whose parameters are all scalars (a per-call launch of the search)."""
        if any(isinstance(k, CStruct) for _, k in self.params):
            raise ValueError(f"{self.name}: a packer of scalars only; pack structs with `pack`")
        fmt = "<" + "".join("Q" if k.endswith("*") else _CTYPES[k] + ("4x" if _CTYPES[k] in "If" else "")
                            for _, k in self.params if isinstance(k, str))
        return _generated(self.name, tuple(n for n, _ in self.params), fmt)

    def declaration(self) -> str:
        """``extern "C" __global__ void name(types...);``: a conflicting redeclaration unless they match."""
        types = ", ".join(k.name if isinstance(k, CStruct) else k for _, k in self.params)
        return f'extern "C" __global__ void {self.name}({types});\n'


def _rows(ctype: str, names: str) -> tuple[tuple[str, str], ...]:
    return tuple((n, ctype) for n in names.split())


#: kernels/index.cuh: the index arrays (device pointers), then the packed widths and the node count
INDEX_VIEW = CStruct("IndexView", (
    *_rows("ptr", "louds_words louds_rank louds_sel0 labels_lo hi_words hi_rank labels_hi linked_words "
                  "linked_rank link_starts suffix terminal_words terminal_rank keyword_ids nflags"),
    *_rows("u32", "hi_width ls_width suffix_width kwid_width num_nodes pad0 pad1 pad2"),
), guard="FT_INDEX_CUH")

#: kernels/params.cuh: inputs, workspace arrays, outputs (device pointers), then the scalars
PARAMS = CStruct("Params", (
    *_rows("ptr", "tok_in lp_in starts ln row_tok row_lp row_nv row_max fr0 fr1 nf tasks chunks fkey fpay pkey "
                  "ppay fcount pcount pool0 pool1 pool_n pool_sel pool_worst step_chunks step_alive err out_err "
                  "out_ids out_scores out_norms out_lens out_nres out_stats"),
    *_rows("u64", "cand_cap chunk_cap"),
    *_rows("u32", "Q T K B R kpad sort_cap ln_len"),
    *_rows("float", "thr_tau thr_sigma ln_min ln_max"),
    *_rows("u32", "signed_tokens pad0"),
), guard="FT_PARAMS_CUH")

#: kernels/step_params.cuh: the index's child and root tables, the same for every launch of a stepper
STEP_TABLES = CStruct("Tab", (*_rows("ptr", "fc rt"), *_rows("u32", "fc_n rt_n")), guard="FT_STEP_PARAMS_CUH")

#: kernels/step_params.cuh: the rows of one launch: states in and out, tokens or ids and their column bounds,
#: the EOS ids, and the outputs of the count, fill and table kernels
STEP_ROWS = CStruct("StepRows", (
    *_rows("ptr", "node_in off_in node_out off_out tok ids begin end eos counts ends offsets tokens table"),
    *_rows("u64", "tok_stride ids_stride width cap"),
    *_rows("i64", "begin_all end_all"),
    *_rows("u32", "n tok_is64 n_eos pad0"),
), guard="FT_STEP_PARAMS_CUH")

#: kernels/step_params.cuh: a mask's output, grid and options (the same for every step of a decode loop)
STEP_MASK = CStruct("StepMask", (
    *_rows("ptr", "outf outb dead_count"),
    *_rows("u64", "V row_stride"),
    *_rows("u32", "parts extra flags pad0"),
), guard="FT_STEP_PARAMS_CUH")

STRUCTS: tuple[CStruct, ...] = (INDEX_VIEW, PARAMS, STEP_TABLES, STEP_ROWS, STEP_MASK)


_VIEW = ("view", "const IndexView*")
_STEP_ROWS = (_VIEW, ("T", STEP_TABLES), ("r", STEP_ROWS))
_STEP_MASK = (*_STEP_ROWS, ("m", STEP_MASK))

#: every kernel the host launches, by its entry point: its file and parameters (kernels/*.cu)
KERNEL_PARAMS: dict[str, KernelParams] = {k.name: k for k in (
    KernelParams("flashtrie_search", "search.cu", (("index_ptr", "const IndexView*"), ("params_ptr", "const Params*"))),
    KernelParams("ft_node_flags", "node_flags.cu", (_VIEW, ("out", "u32*"), ("nwords", "u64"))),
    *(KernelParams(f"ft_step_{n}", "step.cu", _STEP_ROWS)
      for n in ("advance", "walk", "count", "fill", "child_table", "root_table")),
    *(KernelParams(f"ft_step_{n}", "step.cu", _STEP_MASK) for n in ("mask", "advance_mask", "walk_mask")),
    KernelParams("ft_score_mask", "score_mask.cu", (
        ("scores", "void*"), ("allow", "const unsigned char*"), ("live", "unsigned char*"), ("V", "u64"),
        ("row_stride", "u64"), ("allow_stride", "u64"), ("neg_inf", "i64"), ("parts", "u32"), ("width", "u32"),
        ("lowest", "u32"))),
    KernelParams("ft_score_force", "score_mask.cu", (
        ("scores", "void*"), ("allow", "const unsigned char*"), ("live", "const unsigned char*"), ("V", "u64"),
        ("row_stride", "u64"), ("allow_stride", "u64"), ("parts", "u32"), ("group", "u32"), ("width", "u32"))),
)}


def kernel_declarations(file: str) -> str:
    """The declarations `compile_kernel` appends to ``kernels/<file>``: one per kernel of `KERNEL_PARAMS` in it."""
    return "".join(k.declaration() for k in KERNEL_PARAMS.values() if k.file == file)


#: the constants the kernels and the host share, written to kernels/constants.cuh by `constants_header`
#: (name, value, what it means): the search kernel's error bits (``Params.err``, raised by results.py), the
#: kinds of a start hypothesis (kernels/hypothesis.cuh; intake.py packs them) and the absent node
CONSTANTS: tuple[tuple[str, int, str], ...] = (
    ("ERR_BAD_LOGPROB", 1, "a NaN or +inf logprob"),
    ("ERR_DUPLICATE", 2, "a token twice in one row"),
    ("ERR_OVERFLOW", 4, "a workspace too small for the candidates"),
    ("ERR_BAD_TOKEN", 8, "a negative int32 token other than -1"),
    ("KIND_AT_NODE", 0, "a hypothesis at a node (off = the edge's length)"),
    ("KIND_MID", 1, "a hypothesis inside a linked edge (aux = the suffix index of the next token)"),
    ("KIND_LINKED_OFF", 2, "a start inside a linked edge (aux = tokens of the edge consumed)"),
    ("NO_NODE", 0xFFFF_FFFF, "no node: a prefix not in the trie"),
)
#: the search kernel's per-step counters (``Params.out_stats`` columns) as `SearchStats` names, in order
STAT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("STAT_FRONTIER_CANDS", "frontier_candidates",
     "candidates with a child the frontier was selected from (0 at the last step)"),
    ("STAT_POOL_CANDS", "pool_candidates", "whole keywords offered to the pool that beat its worst entry"),
    ("STAT_CHUNKS", "work_chunks", "32-item work chunks of the intersection"),
    ("STAT_LIVE", "live_queries", "queries that expanded a frontier at step t (after the early stop)"),
)
#: a constant's value by name
CONSTANT = {name: value for name, value, _ in CONSTANTS}


def constants_header() -> str:
    """The text of kernels/constants.cuh (`write_constants_header` writes it)."""
    lines = ["// Generated from gpu_impl/layout.py (CONSTANTS, STAT_COLUMNS) (write_constants_header): edit the",
             "// tables there; tests/test_gpu_layout.py checks that this file is what they generate.",
             "#pragma once", ""]
    lines += [f"#define {name} {value:#x}u  // {doc}" for name, value, doc in CONSTANTS]
    lines += [f"#define {name} {i}  // {doc}" for i, (name, _, doc) in enumerate(STAT_COLUMNS)]
    lines += [f"#define NUM_STATS {len(STAT_COLUMNS)}", ""]
    return "\n".join(lines)


def write_constants_header() -> Path:
    """Write kernels/constants.cuh from the tables (through a temporary file); its path."""
    from flashtrie.io_util import atomic_write

    path = Path(__file__).resolve().parent / "kernels" / "constants.cuh"
    atomic_write(path, constants_header().encode())
    return path


def static_asserts(structs: tuple[CStruct, ...] = STRUCTS) -> str:
    """The layout checks `compile_kernel` appends to a kernel source that defines these structs."""
    return "\n// ---- generated from gpu_impl/layout.py\n" + _OFFSETOF + "".join(s.static_asserts() for s in structs)


# A constant offsetof for NVRTC (its front end's address-as-integer builtin): NVRTC 13.0 has no
# __builtin_offsetof, and cuda/std's offsetof is not a constant expression there.
_OFFSETOF = """#ifndef FT_OFFSETOF
#define FT_OFFSETOF(T, f) __INTADDR__(&((T*)0)->f)
#endif
"""

