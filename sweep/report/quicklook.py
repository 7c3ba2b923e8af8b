"""`ssgd-sweep plot`: a quick look at any cube, with xarray's plotting.

One variable (the first float one, or `--var`). Size-1 dimensions are dropped
(their values go in the title). With one dimension left: a line; two: a
heatmap (last dimension across, the one before it down); a third and a fourth
dimension become facet columns and rows; any dimension beyond that is held at
its first value, and the figure and the notes say so. Heatmap cells are
equal-sized whatever the coordinate values (sweeps are often log-spaced or
categorical); tick labels carry the real values. A sampled cube (a `config`
dimension with the sampled keys as coordinates) becomes scatter plots against
the first numeric sampled key instead. Values spanning more than
two decades get a logarithmic colour scale. Axis and colour-bar labels come
from each variable's `long_name` and `units`.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.colors import ListedColormap, LogNorm

from sweep.report.files import FIGURE_SUFFIXES, pyplot, save_figure
from sweep.atomic import check_output
from sweep.errors import SpecError, closest

MAX_TICKS = 12
FACET_SIZE = 2.8  # inches per facet


def plot_cube(cube_path: str | os.PathLike, output: str | os.PathLike | None = None,
              var: str | None = None) -> tuple[Path, list[str]]:
    """Draw `var` of the cube at `cube_path`; returns (figure path, notes for the user)."""
    cube_path = Path(cube_path)
    out = check_output("--output", output if output is not None else cube_path.with_suffix(".png"),
                       FIGURE_SUFFIXES)
    with open_cube(cube_path) as cube:
        name = choose_variable(cube, var)
        data = cube[name].load()
    if data.size == 0:
        raise SpecError("--var", name, "has no values (an empty dimension)")
    fig, notes = draw(data)
    save_figure(fig, out)
    return out, notes


def open_cube(path: Path) -> xr.Dataset:
    if not path.is_file():
        raise SpecError("cube", str(path), "is a directory" if path.is_dir() else "no such file")
    from sweep.engine.store import open_cube as open_with_names

    try:
        return open_with_names(path)
    except Exception as err:  # xarray raises many types for files it cannot read
        reason = " ".join(str(err).split()).split(". ")[0][:120]
        raise SpecError("cube", str(path), f"cannot read as a netCDF cube ({err.__class__.__name__}: {reason})")


def choose_variable(cube: xr.Dataset, var: str | None) -> str:
    numeric = [n for n, v in cube.data_vars.items() if np.issubdtype(v.dtype, np.number)]
    if var is not None:
        if var not in cube.data_vars:
            raise SpecError("--var", var, f"not in the cube; {closest(var, cube.data_vars)}")
        if var not in numeric:
            raise SpecError("--var", var, f"is not numeric ({cube[var].dtype}); choose from {', '.join(numeric)}")
        return var
    floats = [n for n in numeric if np.issubdtype(cube[n].dtype, np.floating)]
    if not numeric:
        raise SpecError("cube", cube.encoding.get("source", "?"), "has no numeric variable to plot")
    return str((floats or numeric)[0])


def draw(data: xr.DataArray):
    """(figure, notes) for one variable of any dimensionality."""
    plt = pyplot()
    notes: list[str] = []
    data = _without_empty_units(data)
    fixed = [f"{d} = {_show(data[d].values[0]) if d in data.coords else 0}"
             for d in data.dims if data.sizes[d] == 1]
    data = data.squeeze(drop=False)
    dims = list(data.dims)
    sampled = _sampled_coords(data)
    if sampled:
        title = _label(data) + (f"  ({', '.join(fixed)})" if fixed else "")
        return _scatter(plt, data, sampled, title, notes), notes
    if len(dims) > 4:
        held = dims[:-4]
        data = data.isel({d: 0 for d in held})
        notes += [f"{d} held at its first value, {_show(data[d].values)} (only 2 facet dimensions fit)"
                  for d in held if d in data.coords]
        fixed += [f"{d} = {_show(data[d].values)}" for d in held if d in data.coords]
        dims = dims[-4:]
    title = _label(data) + (f"  ({', '.join(fixed)})" if fixed else "")

    if len(dims) == 0:
        fig, ax = plt.subplots(figsize=(4, 3.5))
        ax.bar([str(data.name)], [float(data.values)])
        ax.set_ylabel(_label(data))
        ax.set_xlabel("variable")
        ax.set_title(title, fontsize=9)
        return fig, notes
    if len(dims) == 1:
        return _line(plt, data, dims[0], title), notes
    return _heatmap(plt, data, dims, title), notes


def _sampled_coords(data: xr.DataArray) -> list[str]:
    """Coordinates along a dimension without an index (a sampled sweep's `config`)."""
    free = [d for d in data.dims if d not in data.indexes]
    return [c for c in data.coords if free and data[c].dims == (free[-1],)]


def _scatter(plt, data: xr.DataArray, sampled: list[str], title: str, notes: list[str]):
    """Sampled configurations: the variable against the first numeric sampled key,
    coloured by the first categorical one, one panel per value of up to two grid
    dimensions (the rest held at their first value)."""
    config = data[sampled[0]].dims[0]
    numeric = [c for c in sampled if np.issubdtype(data[c].dtype, np.number)]
    categorical = [c for c in sampled if c not in numeric]
    x = numeric[0] if numeric else sampled[0]
    hue = categorical[0] if categorical and categorical[0] != x else None
    grid = [d for d in data.dims if d != config]
    for d in grid[:-2]:
        notes.append(f"{d} held at its first value, {_show(data[d].values[0])} (only 2 facet dimensions fit)")
        title += f"  ({d} = {_show(data[d].values[0])})"
    data = data.isel({d: 0 for d in grid[:-2]})
    grid = grid[-2:]
    rows = list(data[grid[0]].values) if len(grid) == 2 else [None]
    cols = list(data[grid[-1]].values) if grid else [None]
    fig, axes = plt.subplots(len(rows), len(cols), squeeze=False, sharex=True, sharey=True,
                             figsize=(1.0 + 3.6 * len(cols), 0.8 + 3.0 * len(rows)), layout="constrained")
    xs = data[x].values
    groups = list(dict.fromkeys(data[hue].values)) if hue else [None]
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            ax = axes[i, j]
            where = {d: v for d, v in zip(grid, [r for r in (row, col) if r is not None])}
            ys = data.sel(where).values if where else data.values
            for group in groups:
                mask = data[hue].values == group if hue else np.ones(xs.shape, bool)
                ax.scatter(xs[mask], ys[mask], s=8, alpha=0.7, label=str(group) if hue else None)
            if np.issubdtype(xs.dtype, np.number) and xs.min() > 0 and xs.max() / xs.min() >= 20:
                ax.set_xscale("log")  # sampled ranges that wide are usually drawn log-uniform
            if _flags(data):
                ax.set_yticks(range(len(_flags(data))), labels=_flags(data))
            ax.set_title(", ".join(f"{d} = {_show(v)}" for d, v in where.items()), fontsize=9)
            ax.set_xlabel(_label(data[x]))
            ax.set_ylabel(_label(data))
            ax.grid(alpha=0.3)
    if hue:
        axes[0, -1].legend(title=_label(data[hue]), fontsize=8, title_fontsize=8)
    fig.suptitle(f"{title}  [{data.sizes[config]} sampled configurations]", fontsize=10)
    return fig


def _line(plt, data: xr.DataArray, dim: str, title: str):
    fig, ax = plt.subplots(figsize=(6, 4))
    values = data[dim].values if dim in data.coords else np.arange(data.sizes[dim])
    categorical = not np.issubdtype(np.asarray(values).dtype, np.number)
    if categorical:
        data = _positional(data, dim)
    data.plot.line(ax=ax, x=dim, marker="o")
    if categorical:
        _set_ticks(ax.xaxis, values)
    elif np.all(values > 0) and values.max() / values.min() >= 16:
        ax.set_xscale("log")  # sweeps over sizes and counts are usually geometric
        if len(values) <= MAX_TICKS:  # the swept values themselves, not powers of ten
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.set_xticks(values, labels=[_show(v) for v in values])
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return fig


def _heatmap(plt, data: xr.DataArray, dims: list[str], title: str):
    y, x = dims[-2], dims[-1]
    col = dims[-3] if len(dims) >= 3 else None
    row = dims[-4] if len(dims) >= 4 else None
    ticks = {d: (data[d].values if d in data.coords else np.arange(data.sizes[d])) for d in (x, y)}
    plotted = _positional(_positional(data, x), y)
    kwargs = dict(x=x, y=y, col=col, row=row, cbar_kwargs={"label": _label(data)})
    flags = _flags(data)
    finite = data.values[np.isfinite(data.values)] if np.issubdtype(data.dtype, np.floating) else data.values
    if not flags and finite.size and finite.min() > 0 and finite.max() / finite.min() >= 100:
        kwargs["norm"] = LogNorm(vmin=finite.min(), vmax=finite.max())  # values spanning decades
    if flags:
        kwargs.update(cmap=ListedColormap(plt.get_cmap("tab10").colors[:len(flags)]),
                      vmin=-0.5, vmax=len(flags) - 0.5)
    if col is None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        mesh = plotted.plot.pcolormesh(ax=ax, **kwargs)
        axes, colorbar = [ax], mesh.colorbar
        ax.set_title(title, fontsize=9)
    else:
        grid = plotted.plot.pcolormesh(size=FACET_SIZE, aspect=1.25, **kwargs)
        fig, axes, colorbar = grid.fig, list(grid.axs.flat), grid.cbar
        fig.suptitle(title, fontsize=10, y=1.02)
    for ax in axes:
        _set_ticks(ax.xaxis, ticks[x])
        _set_ticks(ax.yaxis, ticks[y])
    if flags and colorbar is not None:
        colorbar.set_ticks(range(len(flags)), labels=flags)
    return fig


def _positional(data: xr.DataArray, dim: str) -> xr.DataArray:
    """`dim`'s coordinate replaced by 0..n-1 (attrs kept): equal cells, any value type."""
    attrs = data[dim].attrs if dim in data.coords else {}
    return data.assign_coords({dim: (dim, np.arange(data.sizes[dim]), attrs)})


def _without_empty_units(data: xr.DataArray) -> xr.DataArray:
    """Counts and names carry units "" in cubes; xarray would print "[]" after them."""
    bare = {c: (data[c].dims, data[c].values, {k: v for k, v in data[c].attrs.items() if k != "units"})
            for c in data.coords if data[c].attrs.get("units") == ""}
    return data.assign_coords(bare) if bare else data


def _set_ticks(axis, values) -> None:
    step = max(1, int(np.ceil(len(values) / MAX_TICKS)))
    positions = np.arange(0, len(values), step)
    labels = [_show(values[i]) for i in positions]
    if axis.axis_name == "x" and max(map(len, labels)) > 4:  # long labels would collide
        axis.set_ticks(positions, labels=labels, rotation=45, ha="right")
    else:
        axis.set_ticks(positions, labels=labels)


def _flags(data: xr.DataArray) -> list[str]:
    """Category names of a flag variable (e.g. `bottleneck`), else []."""
    meanings = data.attrs.get("flag_meanings")
    return str(meanings).split() if meanings else []


def _label(data: xr.DataArray) -> str:
    name = data.attrs.get("long_name", data.name)
    units = data.attrs.get("units")
    return f"{name} [{units}]" if units else str(name)


def _show(value) -> str:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (float, np.floating)) or (isinstance(value, (int, np.integer)) and abs(value) >= 1e5):
        return f"{value:.3g}"
    return str(value)
