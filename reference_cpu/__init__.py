"""flashtrie.reference_cpu: the CPU backends (`MarisaSearcher`, `NumpySearcher`) and the brute-force
`OracleSearcher`."""

from .marisa import MarisaSearcher  # noqa: F401
from .numpy_search import NumpySearcher  # noqa: F401
from .oracle import OracleSearcher  # noqa: F401
