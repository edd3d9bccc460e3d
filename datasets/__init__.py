"""flashtrie.datasets."""
