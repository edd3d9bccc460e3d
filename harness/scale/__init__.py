"""The scale pipeline: its stages (`stages`), their records (`recorder`), and its report (`report`, `plots`)."""
