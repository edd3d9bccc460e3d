"""Shared test setup: hypothesis profiles and import path for the test helpers (oracle, strategies).

Profiles (pick with ``FLASHTRIE_HYPOTHESIS_PROFILE``): ``ci`` (default: no deadline, moderate example
counts so the whole suite runs in a few minutes on 2 cores), ``dev`` (quick) and ``thorough`` (long runs).
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
