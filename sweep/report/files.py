"""Writing figures, tables and study folders: atomically, checked before work starts.

Shared by `explain --plot/--trace`, `plot` and the scripts in `experiments/`.
Every file is written to a temporary name beside its target and renamed, so a
failure never leaves a half-written PNG, JSON or table behind.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sweep.atomic import write_atomically

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
DPI = 100


def pyplot():
    """matplotlib.pyplot on the Agg backend: files only, no screen needed.
    Imported here, not at the top: the backend must be chosen before pyplot
    is first imported."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = DPI) -> Path:
    """Save a matplotlib figure (format from the suffix) and close it."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    try:
        return write_atomically(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight"))
    finally:
        pyplot().close(fig)


def require_data(study: str, path: str | os.PathLike) -> None:
    """Exit 2 with one line when a study's measurements are missing (they live
    in ../shared/data beside the repository, not in it)."""
    if not Path(path).is_file():
        study_error(study, "data", str(path), "not found; the measurements live in ../shared/data beside the "
                                              "repository (see DESIGN.md, section 5)")


def study_error(study: str, key: str, value, reason: str):
    """Exit 2 with one line naming the key and the value (a study's bad input)."""
    print(f"{study}: error: {key} = {value!r}: {reason}", file=sys.stderr)
    raise SystemExit(2)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; cells are used as given (format numbers before)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def study_arguments(name: str, description: str, argv: Sequence[str] | None,
                    extra: Callable[[argparse.ArgumentParser], None] | None = None,
                    fits: bool = False) -> argparse.Namespace:
    """`--quick` and `--out DIR` (default experiments/results/NAME/, created),
    whatever `extra` adds to the parser (a study's own flags), and for a study
    that `fits`, `--prior` and `--tail` (`fit_option_arguments`)."""
    parser = argparse.ArgumentParser(prog=f"experiments/{name}.py", description=description)
    if extra is not None:
        extra(parser)
    if fits:
        fit_option_arguments(parser)
    parser.add_argument("--quick", action="store_true",
                        help="a small grid that runs in seconds (used by the tests)")
    default = Path(__file__).resolve().parents[2] / "experiments" / "results" / name
    parser.add_argument("--out", type=Path, default=default,
                        help=f"output folder (default: experiments/results/{name}/)")
    args = parser.parse_args(argv)
    if fits:
        check_fit_options(name, args)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def fit_option_arguments(parser: argparse.ArgumentParser) -> None:
    """`--prior` and `--tail`: a study's fits with other priors or tail weight
    than `FitOptions`' defaults (README "The strength of the priors")."""
    parser.add_argument("--prior", type=float, metavar="SIGMA",
                        help="the fits' prior strength (default: FitOptions')")
    parser.add_argument("--tail", type=float, help="the fits' weight on the largest errors (default: FitOptions')")


def check_fit_options(study: str, args: argparse.Namespace) -> None:
    """Exit 2 with one line where `--prior` or `--tail` is negative or not finite."""
    for key in ("prior", "tail"):
        value = getattr(args, key)
        if value is not None and not (math.isfinite(value) and value >= 0):
            study_error(study, key, value, "must be a finite number >= 0")


def study_fit_options(args: argparse.Namespace, options):
    """`options` (a FitOptions) with the `--prior` and `--tail` given."""
    given = {key: getattr(args, key) for key in ("prior", "tail") if getattr(args, key, None) is not None}
    return dataclasses.replace(options, **given)
