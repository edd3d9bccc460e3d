"""Shared test setup: hypothesis profiles and import path for the test helpers (oracle, strategies).

Profiles (pick with ``FLASHTRIE_HYPOTHESIS_PROFILE``): ``ci`` (the default: no deadline, moderate example
counts so the whole suite runs in a few minutes on 2 cores), ``dev`` (quick; the default of the fast loop,
``pytest -m "not slow"``) and ``thorough`` (long runs).  Tests that set their own ``max_examples`` keep it.
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", deadline=None, max_examples=60, suppress_health_check=_QUIET)
settings.register_profile("dev", deadline=None, max_examples=15, suppress_health_check=_QUIET)
settings.register_profile("thorough", deadline=None, max_examples=2000, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("FLASHTRIE_HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    """The fast loop (``-m "not slow"``) runs the ``dev`` profile unless a profile is named."""
    if "FLASHTRIE_HYPOTHESIS_PROFILE" not in os.environ and "not slow" in (config.option.markexpr or ""):
        settings.load_profile("dev")
