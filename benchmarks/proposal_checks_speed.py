"""Host cost of building a `Proposals` from fresh numpy arrays (its validation), in µs per query.

    PYTHONPATH=. python benchmarks/proposal_checks_speed.py [--repeat 7] [--number 0]

Rows as a model's top-K gives them on the host: K distinct tokens of a vocabulary V per row in
`np.argsort` order of random logits, float32 logprobs sorted descending; T 8, K 1,000; batches of
Q 1, 8 and 32 queries; int32 and int64 tokens; V 32,768 (tokens fit 16 bits) and 2.2M.  Each cell is
the best of ``--repeat`` timeit rounds (``--number`` calls per round; 0: about 0.2 s per round).
"""

from __future__ import annotations

import argparse
import platform
import timeit

import numpy as np

from flashtrie import Proposals

T, K = 8, 1000
BATCHES = (1, 8, 32)
VOCABS = (32_768, 2_200_000)
DTYPES = (np.int32, np.int64)


def top_k_rows(q: int, vocab: int, dtype: type, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens[q, T, K], logprobs[q, T, K])``: distinct tokens per row, logprobs descending."""
    rng = np.random.default_rng(seed)
    tok = np.empty((q, T, K), dtype=dtype)
    for i in range(q):
        for t in range(T):
            tok[i, t] = rng.choice(vocab, K, replace=False)  # argsort order of random logits: no order
    lp = -np.sort(rng.exponential(3.0, size=(q, T, K)).astype(np.float32), axis=2)
    return tok, lp


def us_per_query(q: int, vocab: int, dtype: type, repeat: int, number: int) -> float:
    tok, lp = top_k_rows(q, vocab, dtype)
    Proposals(tok, lp)  # warm: any table or pool the checks keep
    timer = timeit.Timer(lambda: Proposals(tok, lp))
    if number <= 0:
        number, _ = timer.autorange()
        number = max(1, number // 2)
    return min(timer.repeat(repeat, number)) / number * 1e6 / q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=0)
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}; T {T}, K {K}; µs per query")
    print(f"{'vocab':>10} {'tokens':>6} " + " ".join(f"{'Q ' + str(q):>8}" for q in BATCHES))
    for vocab in VOCABS:
        for dtype in DTYPES:
            cells = [us_per_query(q, vocab, dtype, args.repeat, args.number) for q in BATCHES]
            print(f"{vocab:>10,} {np.dtype(dtype).name:>6} " + " ".join(f"{c:8.1f}" for c in cells))


if __name__ == "__main__":
    main()
