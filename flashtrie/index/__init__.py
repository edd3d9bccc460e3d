"""The narrow-LOUDS index and its building blocks (see docs/index-format.md)."""

from .bits import BitVector
from .narrow_louds import NarrowLoudsIndex
from .packed import PackedInts

__all__ = ["NarrowLoudsIndex", "BitVector", "PackedInts"]
