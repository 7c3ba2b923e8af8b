"""The result of a reduced sweep: its cube, read out of the accumulators.

`statistics` turns merged accumulators (host arrays, `kernels.reduce`) into
the labelled cube of DESIGN 2.6: `X_<statistic>` over the dimensions that
remain, `X_argmin_<K>` with K's value at the optimum (for a sample, the
configuration index and every sampled key, drawn again from the seed).
"""
from __future__ import annotations

import math

import numpy as np
import xarray as xr

from kernels import reduce as kernel
from kernels.outputs import OUTPUT
from sweep.engine.store import decode_sampled, make_layout, without_flags
from sweep.scenario.sensitivity import is_sensitivity, variable_name
from sweep.scenario.spec import Spec


def per_cell(spec: Spec) -> int:
    """Configurations that fold into each cell of the result."""
    return math.prod(n for d, n in zip(spec.dims, spec.shape) if d in spec.reduce.over)


def statistics(spec: Spec, shape: kernel.ReduceShape, acc: dict, devices: int) -> xr.Dataset:
    """The result cube from the accumulators (host arrays)."""
    reduction = spec.reduce
    kept = [(d, n) for d, n, r in zip(spec.dims, spec.shape, shape.reduced) if not r]
    dims = tuple(d for d, _ in kept)
    cell_shape = tuple(n for _, n in kept)
    full = make_layout(spec, devices, tuple(1 for _ in spec.dims))
    coords = {d: (d, full.coords[d][0], full.coords[d][1]) for d in dims if d in full.coords}
    if spec.sample is not None and spec.dims[-1] in dims:
        draws = spec.sample.uniforms(0, spec.sample.n)
        for i, dim in enumerate(spec.sample.dimensions):
            coords[dim.name] = (spec.dims[-1], _sampled(full, dim, draws[:, i]), without_flags(full.sampled[dim.name][1]))
    over = ", ".join(reduction.over)
    count = per_cell(spec)
    data = {}
    for name in spec.outputs:
        var = variable_name(name)
        units, long_name, dtype, flags = _describe(name)
        own = acc[name]
        for stat in reduction.statistics:
            attrs = {"units": units, "long_name": f"{long_name}: {stat} over {over}"}
            if stat in ("min", "max"):
                values = own[stat] if stat == "min" else -own[stat]
                if flags:
                    values = values.astype(dtype)
                    attrs.update(flag_values=np.arange(len(flags), dtype=dtype), flag_meanings=" ".join(flags))
                data[f"{var}_{stat}"] = (dims, values.reshape(cell_shape), attrs)
            elif stat == "mean":
                values = (own["sum"].astype(np.float64) - own["carry"]) / count
                data[f"{var}_mean"] = (dims, values.astype(np.float32).reshape(cell_shape), attrs)
            elif stat in ("argmin", "argmax"):
                for key, (values, key_attrs) in _positions(spec, shape, own[stat], full).items():
                    key_attrs = {**key_attrs, "long_name": f"{key_attrs['long_name']} at the "
                                                           f"{stat[3:]}imum of {var} over {over}"}
                    data[f"{var}_{stat}_{key}"] = (dims, values.reshape(cell_shape), key_attrs)
            else:
                q = dict(reduction.quantiles)[stat]
                values = quantiles(own["hist"], q, reduction.accuracy, integer=bool(flags))
                if flags:
                    values = values.astype(dtype)
                    attrs.update(flag_values=np.arange(len(flags), dtype=dtype), flag_meanings=" ".join(flags))
                attrs["long_name"] += f" (within {reduction.accuracy:g} relative)"
                data[f"{var}_{stat}"] = (dims, values.astype(dtype if flags else np.float32).reshape(cell_shape),
                                         attrs)
    attrs = {**full.attrs, "title": "ssgd-sweep reduced cube", "reduced_over": over,
             "configurations": spec.size}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _describe(name: str):
    """(units, long name, dtype, flags) of an output."""
    if is_sensitivity(name):
        from sweep.scenario.sensitivity import key_of, units
        return units(key_of(name)), f"sensitivity d(iteration_time)/d({key_of(name)})", np.float32, ()
    output = OUTPUT[name]
    return output.units, output.long_name, output.dtype, output.flags


def _positions(spec: Spec, shape: kernel.ReduceShape, words: np.ndarray, full) -> dict:
    """Per reduced dimension (and sampled key), its value at each cell's optimum."""
    out, w = {}, 0
    for d, dim in enumerate(spec.dims):
        if not shape.reduced[d]:
            continue
        if d == shape.config_dim:
            index = (words[w].astype(np.int64) << kernel.WORD_BITS) + words[w + 1]
            w += 2
            out[dim] = (index, {"units": "1", "long_name": "sampled configuration index"})
            draws = spec.sample.uniforms_at(index)
            for i, sampled in enumerate(spec.sample.dimensions):
                out[sampled.name] = (_sampled(full, sampled, draws[:, i]), without_flags(full.sampled[sampled.name][1]))
        else:
            out[dim] = (np.asarray(full.coords[dim][0])[words[w]], full.coords[dim][1])
            w += 1
    return out


def _sampled(full, dim, draws: np.ndarray) -> np.ndarray:
    """A sampled key's values for uniform draws (names decoded)."""
    return decode_sampled(full, dim.name, dim.values(draws))


def quantiles(hist: np.ndarray, q: float, accuracy: float, integer: bool = False) -> np.ndarray:
    """Quantile q of each cell's histogram ([words, cells, bins]): numpy's
    "linear" definition with every order statistic replaced by its bin's
    representative (within `accuracy` relative); for integer codes, the lower
    order statistic, rounded."""
    cumulative = np.cumsum(counts(hist), axis=-1)
    n = cumulative[:, -1]
    rank = q * (n - 1)
    lower = np.floor(rank)
    fraction = rank - lower
    ranks = (lower, np.minimum(lower + 1, n - 1))
    # The bin of the order statistic of rank r: the first whose cumulative count exceeds r.
    values = [_representative((cumulative <= r[:, None]).sum(axis=-1), accuracy) for r in ranks]
    if integer:
        return np.rint(values[0])
    return values[0] + fraction * (values[1] - values[0])


def _representative(index: np.ndarray, accuracy: float) -> np.ndarray:
    """The value a histogram bin stands for: 2 gamma^k / (gamma + 1), within
    `accuracy` of every value in (gamma^(k-1), gamma^k]."""
    log_gamma, lowest, per_sign = kernel.bins(accuracy)
    k = np.abs(index - per_sign) - 1 + lowest
    magnitude = 2 * np.exp(k * log_gamma) / (np.exp(log_gamma) + 1)
    return np.where(index == per_sign, 0.0, np.sign(index - per_sign) * magnitude)


def counts(hist: np.ndarray) -> np.ndarray:
    """Histogram counts (int64) from their words."""
    low = hist[0].astype(np.int64)
    return low + (hist[1].astype(np.int64) << kernel.WORD_BITS) if len(hist) > 1 else low
