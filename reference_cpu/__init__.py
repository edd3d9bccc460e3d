"""flashtrie.reference_cpu."""

from .marisa import MarisaSearcher  # noqa: F401
from .numpy_search import NumpySearcher  # noqa: F401
