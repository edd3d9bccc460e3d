"""``python -m flashtrie``: the same as the ``flashtrie`` command."""

from __future__ import annotations

import sys

from flashtrie.cli import main

if __name__ == "__main__":
    sys.exit(main())
