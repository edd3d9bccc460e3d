"""The query generator's model, shared by its versions: the parameters (`QueryParams`) and their presets, and the
generated workload (`QueryWorkload`); see `datasets.queries` for the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flashtrie.errors import InputError
from flashtrie.limits import MAX_PROPOSALS, MAX_STEPS, MAX_TOKEN
from flashtrie.proposals import Proposals

from ._queries_v2 import VERSION

__all__ = ["GENERATORS", "PRESETS", "VERSION_1", "QueryParams", "QueryWorkload"]

VERSION_1 = "flashtrie.datasets.queries/1"
#: Generator versions: 1 (kept so old seeds reproduce) and 2 (the default: same law, per-query work
#: independent of the library size; `datasets._queries_v2`).
GENERATORS = (VERSION_1, VERSION)

#: Preset values of the tunable `QueryParams` fields.
PRESETS: dict[str, dict[str, Any]] = {
    "dense": {
        "num_relevant": 256, "density": 0.95, "subtree_share": 0.3, "min_topic_size": 4096,
        "topic_sample": 4096, "background_sample": 8192, "length_bias": 2.0, "path_length_bias": 8.0,
        "logit_levels": (10.0, 6.0, 4.0, 0.0),
    },
    "sparse": {
        "num_relevant": 8, "density": 0.0, "subtree_share": 0.5, "min_topic_size": 8,
        "topic_sample": 8, "background_sample": 0, "length_bias": 1.0, "path_length_bias": 1.0,
        "logit_levels": (6.0, 3.0, 2.0, 0.0),
    },
}


@dataclass(frozen=True)
class QueryParams:
    """Every parameter that generated a workload (saved with it)."""

    num_queries: int
    num_steps: int = 8
    proposals_per_step: int = 1000
    preset: str = "dense"
    seed: int = 0
    num_relevant: int = 256
    density: float = 0.95
    subtree_share: float = 0.3
    topic_depth: int = 1
    min_topic_size: int = 4096
    topic_size_power: float = 0.5
    topic_sample: int = 4096
    background_sample: int = 8192
    length_bias: float = 2.0
    path_length_bias: float = 8.0
    popularity_power: float = 1.0
    popular_pool: int = 4
    vocab_size: int = 0
    logit_levels: tuple[float, float, float, float] = (10.0, 6.0, 4.0, 0.0)
    logit_slope: float = 1.0
    logit_noise: float = 1.0
    tail_logit: float = 5.0
    sort_rows: bool = False
    library_size: int = 0
    library_fingerprint: str = ""
    generator: str = field(default=VERSION)

    def __post_init__(self) -> None:
        object.__setattr__(self, "logit_levels", tuple(float(x) for x in self.logit_levels))
        checks: list[tuple[str, bool, str]] = [
            ("num_queries", self.num_queries >= 0, ">= 0"),
            ("num_steps", 1 <= self.num_steps <= MAX_STEPS, f"in [1, {MAX_STEPS}]"),
            ("proposals_per_step", 1 <= self.proposals_per_step <= MAX_PROPOSALS, f"in [1, {MAX_PROPOSALS}]"),
            ("generator", self.generator in GENERATORS, f"one of {list(GENERATORS)}"),
            ("preset", self.preset in PRESETS or self.preset == "custom", f"one of {sorted(PRESETS)} or 'custom'"),
            ("num_relevant", self.num_relevant >= 1, ">= 1"),
            ("density", 0.0 <= self.density <= 1.0, "in [0, 1]"),
            ("subtree_share", 0.0 <= self.subtree_share <= 1.0, "in [0, 1]"),
            ("topic_depth", self.topic_depth >= 1, ">= 1"),
            ("min_topic_size", self.min_topic_size >= 1, ">= 1"),
            ("topic_size_power", math.isfinite(self.topic_size_power), "finite"),
            ("topic_sample", self.topic_sample >= 1, ">= 1"),
            ("background_sample", self.background_sample >= 0, ">= 0"),
            ("length_bias", math.isfinite(self.length_bias), "finite"),
            ("path_length_bias", math.isfinite(self.path_length_bias), "finite"),
            ("popularity_power", math.isfinite(self.popularity_power) and self.popularity_power >= 0, ">= 0"),
            ("popular_pool", self.popular_pool >= 1, ">= 1"),
            ("vocab_size", 0 <= self.vocab_size <= MAX_TOKEN + 1, f"in [0, {MAX_TOKEN + 1}] (0: from the library)"),
            ("logit_levels", len(self.logit_levels) == 4 and all(map(math.isfinite, self.logit_levels)),
             "4 finite values (relevant, topic, popular, random)"),
            ("logit_slope", math.isfinite(self.logit_slope) and self.logit_slope >= 0, ">= 0"),
            ("logit_noise", math.isfinite(self.logit_noise) and self.logit_noise >= 0, ">= 0"),
            ("tail_logit", math.isfinite(self.tail_logit) or self.tail_logit == -math.inf, "finite or -inf"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise InputError(f"{name}: expected {want}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        d = asdict(self)
        d["logit_levels"] = list(d["logit_levels"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueryParams:
        """Inverse of `to_dict`."""
        try:
            return cls(**d)
        except TypeError as e:
            raise InputError(f"query parameters: {e}") from None


@dataclass(frozen=True, eq=False)
class QueryWorkload:
    """Generated queries: ``proposals`` ([Q, T, K]), ``relevant[q]`` (sorted keyword ids), the generating params.

    ``topics[q]`` is query q's topic prefix (``topic_depth`` tokens; every relevant keyword starts with it).
    Relevant ids are canonical: for a keyword given twice, the smaller id (the one a search returns).
    """

    proposals: Proposals
    relevant: list[np.ndarray]
    params: QueryParams
    topics: np.ndarray

    @property
    def num_queries(self) -> int:
        return self.proposals.num_queries
