"""The `[reduce]` table: a sweep that returns its answer, not its cube.

    [reduce]
    over = ["strategy", "bucket_bytes"]    # swept keys, or "config" for a sample
    statistics = ["min", "argmin", "q50"]  # min max mean argmin argmax q0..q100
    accuracy = 0.01                        # relative accuracy of the quantiles

Every selected output X gives `X_<statistic>` over the dimensions that remain;
`argmin` / `argmax` give `X_argmin_<K>` for every reduced dimension K (K's
value at the optimum; for a sample, the `config` index and every sampled
key). Quantiles come from a histogram with logarithmic bins of relative
width `accuracy` (a quantile lies within that relative distance of the exact
one: DDSketch's bins, Masson, Rim and Lee, VLDB 2019); min, max, mean and the
arg-statistics are exact.
"""
from __future__ import annotations

import dataclasses
import math
import re

from sweep.errors import SpecError, closest

STATISTICS = ("min", "max", "mean", "argmin", "argmax")
QUANTILE = re.compile(r"q(\d+)")
DEFAULT_ACCURACY = 0.01
SAMPLE_DIM = "config"


@dataclasses.dataclass(frozen=True)
class Reduction:
    over: tuple[str, ...]  # cube dimensions as written (`inter.bandwidth`, `config`)
    statistics: tuple[str, ...]
    accuracy: float = DEFAULT_ACCURACY

    @property
    def quantiles(self) -> tuple[tuple[str, float], ...]:
        """(statistic, fraction) of every requested quantile."""
        return tuple((s, quantile_of(s)) for s in self.statistics if QUANTILE.fullmatch(s))

    def table(self) -> dict:
        """As written in a scenario file."""
        return {"over": list(self.over), "statistics": list(self.statistics), "accuracy": self.accuracy}


def quantile_of(statistic: str) -> float:
    """`q50` -> 0.5 (the digits are a percentage; `q999` would be 9.99)."""
    return int(QUANTILE.fullmatch(statistic).group(1)) / 100


def parse_reduce(table, dims: tuple[str, ...]) -> Reduction:
    """Validate a `[reduce]` table against the cube's dimensions (as written)."""
    if not isinstance(table, dict):
        raise SpecError("reduce", table, "must be a table with over and statistics")
    unknown = set(table) - {"over", "statistics", "accuracy"}
    if unknown:
        field = sorted(unknown)[0]
        raise SpecError(f"reduce.{field}", table[field], "unknown field; use over, statistics, accuracy")
    over = _names(table, "over", 'a non-empty list of swept keys (or "config" for a sample)')
    for key in over:
        if key not in dims:
            hint = closest(key, dims) if dims else "this scenario sweeps nothing"
            raise SpecError("reduce.over", key, f"not a swept key of this scenario; {hint}")
    statistics = _names(table, "statistics", 'a non-empty list, e.g. ["min", "argmin", "q50"]')
    for statistic in statistics:
        match = QUANTILE.fullmatch(statistic)
        if match is None and statistic not in STATISTICS:
            raise SpecError("reduce.statistics", statistic,
                            f"unknown statistic; {closest(statistic, STATISTICS + ('q01', 'q50', 'q99'))} "
                            "(quantiles are q0 to q100)")
        if match is not None and not 0 <= int(match.group(1)) <= 100:
            raise SpecError("reduce.statistics", statistic, "a quantile must lie in 0..1: q0 to q100 (percent)")
    accuracy = table.get("accuracy", DEFAULT_ACCURACY)
    if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not math.isfinite(accuracy) \
            or not 1e-4 <= accuracy <= 0.1:
        raise SpecError("reduce.accuracy", accuracy, "the quantiles' relative accuracy must lie in 1e-4..0.1")
    ordered = tuple(d for d in dims if d in over)  # cube order: what argmin's tie-break follows
    return Reduction(ordered, tuple(statistics), float(accuracy))


def _names(table, field: str, what: str) -> list[str]:
    """A field holding a list of distinct names (one name alone is a list of one)."""
    names = table.get(field)
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise SpecError(f"reduce.{field}", names, f"must be {what}")
    if len(set(names)) != len(names):
        raise SpecError(f"reduce.{field}", names, "names one twice")
    return names
