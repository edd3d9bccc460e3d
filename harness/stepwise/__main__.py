"""``python -m flashtrie.harness.stepwise ...``: ``flashtrie bench stepwise``, the stepwise bench, or ``render``
of its records."""

from flashtrie.harness.stepwise.run import main

raise SystemExit(main())
