"""flashtrie.gpu_impl."""
