"""The step kernels' parameters (kernels/step.cu) and the mask grid.

Every step kernel takes the index view's device address, then the structs of kernels/step_params.cuh by
value (`flashtrie.gpu_impl.layout.KERNEL_PARAMS`): the tables (`TABLES`), the rows of the launch (`ROWS`, by
kernel) and a mask kernel the mask (`MASK`), each packed by field name from its table in
`flashtrie.gpu_impl.layout` with only the fields the kernel reads (the rest 0).  `head` packs the view and
the tables, the same for every launch of a stepper.  `flashtrie.gpu_impl.launch.Launcher` launches them.
"""

from __future__ import annotations

from typing import Any

from .layout import KERNEL_PARAMS, STEP_MASK, STEP_ROWS, STEP_TABLES

__all__ = ["TABLES", "MASK", "ROWS", "head", "mask_grid", "sm_count"]

#: the child and root tables (pointers, then the nodes and labels they cover)
TABLES = STEP_TABLES.packer("fc", "rt", "fc_n", "rt_n")
#: a mask's output (float32 logits or a bool mask), its dead-row counter, its grid and options
MASK = STEP_MASK.packer("outf", "outb", "dead_count", "V", "row_stride", "parts", "extra", "flags")
#: the rows each kernel reads, by kernel
ROWS = {
    "advance": STEP_ROWS.packer("node_in", "off_in", "node_out", "off_out", "tok", "eos", "tok_stride", "n",
                                "tok_is64", "n_eos"),
    "walk": STEP_ROWS.packer("node_out", "off_out", "ids", "begin", "end", "eos", "ids_stride", "width",
                             "begin_all", "end_all", "n", "n_eos"),
    "mask": STEP_ROWS.packer("node_in", "off_in", "eos", "n", "n_eos"),
    "walk_mask": STEP_ROWS.packer("ids", "begin", "end", "eos", "ids_stride", "width", "begin_all", "end_all", "n",
                                  "n_eos"),
    "count": STEP_ROWS.packer("node_in", "off_in", "counts", "ends", "n"),
    "fill": STEP_ROWS.packer("node_in", "off_in", "offsets", "tokens", "cap", "n"),
    "table": STEP_ROWS.packer("table", "n"),
}
ROWS["advance_mask"] = ROWS["advance"]


def head(view: int, tables: bytes) -> bytes:
    """The parameters every step launch starts with: the view's device address and the packed tables."""
    return KERNEL_PARAMS["ft_step_mask"].pack(view=view, T=tables)


def mask_grid(n: int, v: int, additive: bool, chunk: int, blocks_per_row: int | None,
              target: int) -> tuple[int, int]:
    """Blocks per row of a mask launch: (parts, extra), the first ``extra`` rows in parts + 1 blocks and the
    others in ``parts`` (kernels/step_mask.cuh mask_row).  ``blocks_per_row`` None: the grid is a multiple of
    ``target`` (every SM gets as many bytes to store: a grid that is no multiple of the SM count stores
    slower) with at least one block a row; always at most one block per ``chunk`` entries of a row (a row
    starts up to 3 float32 or 15 bool entries into its first chunk)."""
    chunks = -(-(v + (3 if additive else 15)) // chunk)
    if blocks_per_row:
        return min(int(blocks_per_row), chunks), 0
    parts, extra = divmod(target * max(1, -(-n // target)), max(n, 1))
    if parts + (extra > 0) > chunks:
        return chunks, 0
    return parts, extra


def sm_count(device: Any) -> int:
    """The device's multiprocessor count."""
    try:
        return int(device.properties.multiprocessor_count)
    except Exception:  # noqa: BLE001 - an older cuda.core: the H200's count
        return 132
