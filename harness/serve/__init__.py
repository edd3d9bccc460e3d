"""The serving benchmark (``flashtrie bench serve``): fresh proposals per call, searched where they are made;
`sources` (the head's top-K on the GPU, host arrays), `run` (cases, timing, records) and `report` (its suite)."""
