"""Remake the command-line example's files from names.txt: tokenizer.json, a word-level tokenizer trained on
the names (`tokenizers`), and q.tsv, two queries of proposals whose token ids come from that tokenizer.

Run from the repository root: ``python examples/make_examples.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent

#: Each query: its name, then per step the proposed words with their log-probabilities, best first (what a
#: model's top K at each step would be); every query has the same number of steps.
QUERIES = [
    ("red things", [[("red", -0.1), ("running", -0.7)], [("shoes", -0.2), ("rain", -0.9)],
                    [("jacket", -0.3), ("shirt", -1.5)]]),
    ("something for the rain", [[("rain", -0.2), ("red", -0.4)], [("jacket", -0.3), ("rain", -0.5)],
                                [("jacket", -0.1), ("boots", -1.2)]]),
]


def main() -> None:
    names = (HERE / "names.txt").read_text(encoding="utf-8").splitlines()
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(names, trainers.WordLevelTrainer(special_tokens=["[UNK]"], show_progress=False))
    tok.save(str(HERE / "tokenizer.json"))
    lines = []
    for name, steps in QUERIES:
        indices = [[tok.token_to_id(word) for word, _ in step] for step in steps]
        probs = [[lp for _, lp in step] for step in steps]
        lines.append(f"{name}\t{json.dumps({'indices': indices, 'probs': probs})}\n")
    (HERE / "q.tsv").write_text("".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
