"""flashtrie.harness."""
