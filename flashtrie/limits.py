"""Limits shared by every backend, and the reserved padding token."""

from __future__ import annotations

#: Token value reserved for padding (2**32 - 1, or -1 in a signed array).
PAD_TOKEN: int = 0xFFFF_FFFF
#: Largest token a keyword may hold.
MAX_TOKEN: int = PAD_TOKEN - 1

#: Most keywords (input positions, duplicates included) an index holds: its id map stores an id in at most 32 bits.
MAX_KEYWORDS: int = 2**32

MAX_BEAM_WIDTH: int = 65_535
MAX_PROPOSALS: int = 65_535  # K, proposals per row
MAX_STEPS: int = 255  # T, decoding steps
MAX_RESULTS: int = 65_535  # R
