"""The stepwise suite: per-step cost of the constraint (mask + advance) for autoregressive decoders, on the GPU
stepper and the numpy one, with transformers' own constrained decoding beside it (`run`: the bench)."""
