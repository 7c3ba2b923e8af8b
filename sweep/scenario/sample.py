"""Sampled sweeps: a `[sample]` table draws N configurations over ranges.

    [sample]
    n = 1_000_000
    method = "sobol"          # or "random" (default)
    seed = 0
    inter.bandwidth = { min = 1e9, max = 1e11, scale = "log" }
    batch_size = { min = 8, max = 256 }
    strategy = ["bsp", "wfbp", "mgwfbp"]   # a list: uniform choice

Draws are a pure function of (seed, configuration index), so any range of
configurations can be generated on its own: chunks are independent, memory is
bounded by the chunk, and a resumed sweep draws exactly what it drew before.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping

import numpy as np

from sweep.scenario.schema import KEYS, KEYS_HELP, STRUCTURAL, canonical, check_value
from sweep.errors import SpecError, closest

METHODS = ("random", "sobol")
SCALES = ("linear", "log")
MAX_SAMPLES = 10**12
MAX_SOBOL = 2**30  # scipy's Sobol engine draws at most 2**30 points
_BLOCK = 1 << 16  # random draws come in blocks seeded by (seed, block)


@dataclasses.dataclass(frozen=True)
class Dimension:
    name: str  # as written
    key: str  # canonical
    low: float | None = None
    high: float | None = None
    scale: str = "linear"
    choices: tuple | None = None

    @property
    def integer(self) -> bool:
        return KEYS[self.key].kind is int

    def values(self, u: np.ndarray):
        """Map uniform draws in [0, 1) to this dimension's values: an array of
        numbers, or indices into `choices`."""
        if self.choices is not None:
            return np.minimum((u * len(self.choices)).astype(np.int64), len(self.choices) - 1)
        high = self.high + 1 if self.integer else self.high  # integers: [low, high] inclusive
        if self.scale == "log":
            x = np.exp(math.log(self.low) + u * (math.log(high) - math.log(self.low)))
        else:
            x = self.low + u * (high - self.low)
        return np.minimum(np.floor(x), self.high) if self.integer else x


@dataclasses.dataclass(frozen=True)
class Sample:
    n: int
    method: str
    seed: int
    dimensions: tuple[Dimension, ...]

    def uniforms(self, start: int, stop: int) -> np.ndarray:
        """Uniform draws [stop - start, d] for configurations start..stop-1."""
        d = len(self.dimensions)
        if self.method == "sobol":
            from scipy.stats import qmc  # here: every scenario read would pay scipy.stats' import (0.8 s)

            engine = qmc.Sobol(d, scramble=True, seed=self.seed)
            if start:
                engine.fast_forward(start)  # (scipy rejects a fast-forward by 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # balance warnings for n not a power of two
                return engine.random(stop - start)
        blocks = []
        for block in range(start // _BLOCK, (stop - 1) // _BLOCK + 1):
            rng = np.random.default_rng([self.seed, block])
            draws = rng.random((_BLOCK, d))
            lo = max(start - block * _BLOCK, 0)
            hi = min(stop - block * _BLOCK, _BLOCK)
            blocks.append(draws[lo:hi])
        return np.concatenate(blocks)

    def uniforms_at(self, indices: np.ndarray) -> np.ndarray:
        """Uniform draws [len(indices), d] for the given configuration indices
        (as `uniforms` draws them: one block or fast-forward per distinct place)."""
        indices = np.asarray(indices, np.int64).ravel()
        out = np.empty((indices.size, len(self.dimensions)))
        if self.method == "random":
            for block in np.unique(indices // _BLOCK):
                at = indices // _BLOCK == block
                out[at] = self.uniforms(int(block) * _BLOCK, int(block + 1) * _BLOCK)[indices[at] - block * _BLOCK]
            return out
        for i in np.unique(indices):
            out[indices == i] = self.uniforms(int(i), int(i) + 1)[0]
        return out


def parse_sample(table: Mapping, taken: set[str]) -> Sample:
    """Validate a `[sample]` table; `taken` holds canonical keys given elsewhere."""
    if not isinstance(table, Mapping):
        raise SpecError("sample", table, "must be a table")
    n = table.get("n")
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n) or not 1 <= n <= MAX_SAMPLES:
        raise SpecError("sample.n", n, f"must be an integer from 1 to {MAX_SAMPLES:.0e}")
    method = table.get("method", "random")
    if method not in METHODS:
        raise SpecError("sample.method", method, closest(method, METHODS))
    if method == "sobol" and n > MAX_SOBOL:
        raise SpecError("sample.n", n, f"a Sobol sample draws at most 2**30 = {MAX_SOBOL:,} configurations; "
                                       'use method = "random" or a smaller n')
    seed = table.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError("sample.seed", seed, "must be a non-negative integer")
    dims = []
    for written, value in _ranges(table):
        key = canonical(written)
        if key not in KEYS:
            raise SpecError(f"sample.{written}", value, f"unknown key; {closest(written, sorted(KEYS), KEYS_HELP)}")
        if key in STRUCTURAL:
            raise SpecError(f"sample.{written}", value, "cannot be sampled; sweep it with a list outside [sample]")
        if key in taken:
            raise SpecError(f"sample.{written}", value, "also given outside [sample]")
        taken.add(key)
        dims.append(_dimension(written, key, value))
    if not dims:
        raise SpecError("sample", dict(table), "names no key to sample")
    return Sample(int(n), method, seed, tuple(dims))


def _ranges(table: Mapping, prefix: str = ""):
    for name, value in table.items():
        if not prefix and name in ("n", "method", "seed"):
            continue
        written = f"{prefix}{name}"
        if isinstance(value, Mapping) and not ({"min", "max"} & set(value)):
            yield from _ranges(value, written + ".")
        else:
            yield written, value


def _dimension(written: str, key: str, value) -> Dimension:
    where = f"sample.{written}"
    if isinstance(value, list):
        if not value:
            raise SpecError(where, value, "empty list of choices")
        choices = tuple(check_value(written, v) for v in value)
        if len(set(choices)) != len(choices):
            raise SpecError(where, value, "repeated choice")
        return Dimension(written, key, choices=choices)
    if not isinstance(value, Mapping):
        raise SpecError(where, value, "give a list of choices or a table {min, max, scale}")
    unknown = set(value) - {"min", "max", "scale"}
    if unknown:
        raise SpecError(where, value, f"unknown field {sorted(unknown)[0]!r}; use min, max, scale")
    if KEYS[key].kind not in (int, float):
        raise SpecError(where, value, "a range needs a numeric key; give a list of choices")
    if "min" not in value or "max" not in value:
        raise SpecError(where, value, "a range needs both min and max")
    low, high = check_value(written, value["min"]), check_value(written, value["max"])
    if not low < high:
        raise SpecError(where, value, "min must be below max")
    scale = value.get("scale", "linear")
    if scale not in SCALES:
        raise SpecError(f"{where}.scale", scale, closest(scale, SCALES))
    if scale == "log" and low <= 0:
        raise SpecError(f"{where}.min", low, "a log scale needs min > 0")
    return Dimension(written, key, float(low), float(high), scale)
