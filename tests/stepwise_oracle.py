"""Brute-force reading of the stepwise API, for tests: a dict trie of tuples and walks over histories."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

DEAD, FINISHED = "dead", "finished"


class DictTrie:
    """Next tokens of every keyword prefix (tuple -> sorted list) and the set of whole keywords."""

    def __init__(self, keywords: Sequence[Sequence[int]]) -> None:
        self.children: dict[tuple[int, ...], set[int]] = {}
        self.words: set[tuple[int, ...]] = set()
        for kw in keywords:
            key = tuple(int(x) for x in kw)
            self.words.add(key)
            for i in range(len(key)):
                self.children.setdefault(key[:i], set()).add(key[i])
            self.children.setdefault(key, set())

    def allowed(self, h: object) -> list[int]:
        return sorted(self.children.get(h, ())) if isinstance(h, tuple) else []

    def ends(self, h: object) -> bool:
        return isinstance(h, tuple) and h in self.words

    def advance(self, h: object, x: int, eos: Sequence[int] = ()) -> object:
        if h == FINISHED:
            return FINISHED
        if h == DEAD:
            return DEAD
        if x in eos:
            return FINISHED if h in self.words else DEAD
        nxt = h + (x,)
        return nxt if nxt in self.children else DEAD

    def mask(self, h: object, vocab: int, eos: Sequence[int]) -> np.ndarray:
        m = np.zeros(vocab, dtype=bool)
        if isinstance(h, tuple):
            m[self.allowed(h)] = True
        if not isinstance(h, tuple) or self.ends(h):
            m[list(eos)] = True
        return m


def pick_token(rnd: random.Random, trie: DictTrie, h: object, alphabet: list[int], eos: Sequence[int]) -> int:
    """A next token for history h: mostly a valid child, sometimes EOS, a wrong token or a far one."""
    u = rnd.random()
    kids = trie.allowed(h)
    if kids and u < 0.7:
        return rnd.choice(kids)
    if eos and u < 0.82:
        return rnd.choice(list(eos))
    if u < 0.95:
        return rnd.choice(alphabet)
    return rnd.randrange(2**32 - 1)
