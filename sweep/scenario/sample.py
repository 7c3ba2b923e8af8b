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
"random" draws come from the counter-based generator of `kernels.draws`
(24-bit uniforms, the same bits on the host and the devices, so the devices
can make a chunk's draws themselves: `sweep.engine.device_draws`); "sobol"
draws are scrambled Sobol points made on the host.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping

import numpy as np

from kernels import draws
from sweep.scenario.schema import KEYS, KEYS_HELP, STRUCTURAL, canonical, check_value
from sweep.errors import SpecError, closest

METHODS = ("random", "sobol")
SCALES = ("linear", "log")
MAX_SAMPLES = 10**12
MAX_SOBOL = 2**30  # scipy's Sobol engine draws at most 2**30 points
MAX_SEED = 2**64  # the generator's key is two 32-bit words
MAX_TABLE = 1 << 16  # an integer range with more values maps its draws by formula, not by table


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

    @property
    def discrete(self) -> bool:
        """Whether draws map to positions in a table of values (choices, or
        an integer range of at most MAX_TABLE values): by thresholds."""
        return self.choices is not None or (self.integer and self.count <= MAX_TABLE)

    @property
    def count(self) -> int:
        return len(self.choices) if self.choices is not None else int(self.high - self.low) + 1

    @property
    def table(self) -> tuple:
        """A discrete dimension's values, in position order."""
        return self.choices if self.choices is not None else tuple(range(int(self.low), int(self.high) + 1))

    def thresholds(self) -> np.ndarray:
        """A discrete dimension's count - 1 ascending 24-bit words: a draw's
        position is how many it reaches (`kernels.draws.positions`). Position
        k starts where the continuous map (`values`' formula) reaches table
        value k."""
        k = np.arange(1, self.count, dtype=np.int64)
        if self.choices is not None or self.scale == "linear":
            return ((k << draws.BITS) + self.count - 1) // self.count  # ceil(k 2**24 / count), exact
        log_low, log_high = math.log(self.low), math.log(self.high + 1)
        return np.ceil((np.log(self.low + k) - log_low) / (log_high - log_low) * 2.0 ** draws.BITS).astype(np.int64)

    def values(self, u: np.ndarray):
        """Map uniform draws in [0, 1) to this dimension's values: an array of
        numbers, or indices into `choices`."""
        if self.discrete:
            word = np.floor(np.asarray(u) * 2.0 ** draws.BITS).astype(np.int64)
            position = draws.positions(np, word, self.thresholds())
            return position if self.choices is not None else self.low + position.astype(np.float64)
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
        return self.uniforms_at(np.arange(start, stop, dtype=np.int64))

    def uniforms_at(self, indices: np.ndarray) -> np.ndarray:
        """Uniform draws [len(indices), d] for the given configuration indices
        (as `uniforms` draws them)."""
        indices = np.asarray(indices, np.int64).ravel()
        if self.method == "sobol":
            out = np.empty((indices.size, len(self.dimensions)))
            for i in np.unique(indices):
                out[indices == i] = self.uniforms(int(i), int(i) + 1)[0]
            return out
        low, high = (indices & 0xFFFFFFFF).astype(np.uint32), (indices >> 32).astype(np.uint32)
        seed = seed_words(self.seed)
        return np.stack([draws.words(np, seed, d, low, high) for d in range(len(self.dimensions))], axis=-1) \
            * 2.0 ** -draws.BITS


def seed_words(seed: int) -> tuple[int, int]:
    """The generator's key: the seed's low and high 32-bit words."""
    return seed & 0xFFFFFFFF, seed >> 32


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
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED:
        raise SpecError("sample.seed", seed, "must be an integer from 0 to 2**64 - 1")
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
