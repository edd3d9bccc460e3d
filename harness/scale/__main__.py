"""``python -m flashtrie.harness.scale PROCESS ...``: ``flashtrie bench scale-step``, one process of the scale
pipeline (see `stages`)."""

import sys

from flashtrie.harness.scale.stages import main

sys.exit(main())
