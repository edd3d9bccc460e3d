"""flashtrie.reference_cpu."""
