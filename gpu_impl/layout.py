"""The structs the host hands the kernels, described once: `PARAMS` and `INDEX_VIEW` (the search kernel
reads them from device memory) and `STEP_TABLES`, `STEP_ROWS`, `STEP_MASK` (the step kernels' parameters
after the view, passed by value).

Each is a table of ``(name, ctype)`` rows in the field order of ``kernels/params.cuh``, ``kernels/index.cuh``
and ``kernels/step_params.cuh``.  From the table come the `struct` format the host packs with (`CStruct.pack`)
and the C++ ``static_assert`` lines (`CStruct.static_asserts`) that `compile_kernel` appends to every
kernel source, so a struct that drifts from its table fails to compile.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

__all__ = ["CStruct", "PARAMS", "INDEX_VIEW", "STEP_TABLES", "STEP_ROWS", "STEP_MASK", "STRUCTS", "static_asserts"]

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

    def packer(self, names: str) -> Callable[..., bytes]:
        """A packer of the struct's bytes from the values of the fields ``names`` (space-separated, in the
        table's order), positional, every other field 0: the parameters of a kernel that reads only those."""
        want = names.split()
        order = [n for n, _ in self.fields if n in want]
        unknown = [n for n in want if n not in self.offsets]
        if unknown or order != want:
            raise ValueError(f"{self.name}: expected fields in the table's order, got {want} (unknown: {unknown})")
        parts, pos = ["<"], 0
        for name in want:
            ctype = dict(self.fields)[name]
            off = self.offsets[name]
            if off > pos:
                parts.append(f"{off - pos}x")
            parts.append(_CTYPES[ctype])
            pos = off + struct.calcsize(_CTYPES[ctype])
        if self.size > pos:
            parts.append(f"{self.size - pos}x")
        return struct.Struct("".join(parts)).pack

    def static_asserts(self) -> str:
        """C++ lines that fail to compile unless the struct has this table's size and offsets."""
        lines = [f'static_assert(sizeof({self.name}) == {self.size}, "{self.name}: sizeof differs from '
                 f'gpu_impl/layout.py");']
        for name, off in self.offsets.items():
            lines.append(f'static_assert(FT_OFFSETOF({self.name}, {name}) == {off}, '
                         f'"{self.name}.{name}: offset differs from gpu_impl/layout.py");')
        body = "\n".join(lines) + "\n"
        return f"#ifdef {self.guard}\n{body}#endif\n" if self.guard else body


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


def static_asserts(structs: tuple[CStruct, ...] = STRUCTS) -> str:
    """The layout checks `compile_kernel` appends to a kernel source that defines these structs."""
    return "\n// ---- generated from gpu_impl/layout.py\n" + _OFFSETOF + "".join(s.static_asserts() for s in structs)


# A constant offsetof for NVRTC (its front end's address-as-integer builtin): NVRTC 13.0 has no
# __builtin_offsetof, and cuda/std's offsetof is not a constant expression there.
_OFFSETOF = """#ifndef FT_OFFSETOF
#define FT_OFFSETOF(T, f) __INTADDR__(&((T*)0)->f)
#endif
"""
