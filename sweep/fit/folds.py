"""The folds of a validation split: which rows train a fit and which it
predicts (`ssgd-sweep validate --split`, and the held-out scatter of
`--interval-split`, `sweep.fit.conformal`). The splits are described in
`sweep.fit.validate`."""
from __future__ import annotations

import dataclasses

import numpy as np

from sweep.errors import SpecError
from sweep.fit.data import Row, TARGETS
from sweep.scenario.schema import KEYS, canonical

SPLITS = ("gpus", "method", "rows", "size")
METHOD_KEYS = ("strategy", "algorithm", "ps.pipelined", "ps.servers", "bucket_bytes", "preset")
METHOD_COLUMN = "method"


@dataclasses.dataclass(frozen=True)
class Fold:
    name: str
    train: tuple[int, ...]  # row indices
    test: tuple[int, ...]


def workers(row: Row) -> int:
    return int(row.point.get("nodes", 1)) * int(row.point.get("gpus_per_node", 1))


def method_of(row: Row) -> str:
    label = row.cells.get(METHOD_COLUMN, "").strip()
    if label:
        return label
    return ",".join(f"{k}={row.point[k]}" for k in METHOD_KEYS if k in row.point) or "(default)"


def check_split(split: str, flag: str = "--split") -> str:
    """`split` if it names a split, else its scenario key; SpecError (`flag`) otherwise."""
    if split in SPLITS:
        return split
    key = canonical(split)
    if key not in KEYS:
        raise SpecError(flag, split, f"choose {', '.join(SPLITS)} or a scenario key")
    return key


def make_folds(rows: list[Row], split: str, folds: int | None = None, cut: float | None = None,
               reference: str | None = None, min_gpus: int | None = None, seed: int = 0) -> list[Fold]:
    """The folds of a split (module docstring)."""
    everyone = range(len(rows))

    def held(indices):
        return tuple(i for i in indices if min_gpus is None or workers(rows[i]) >= min_gpus)

    out: list[Fold] = []
    if split == "gpus":
        counts = sorted({workers(r) for r in rows})
        if cut is not None:
            cuts = [cut]
        else:
            cuts = counts[1:-1][::-1][:folds or len(counts)]
        for c in cuts:
            train = tuple(i for i in everyone if workers(rows[i]) <= c)
            test = held(i for i in everyone if workers(rows[i]) > c)
            out.append(Fold(f"fit <= {c:g} GPUs, predict more", train, test))
    elif split == "method":
        methods = [method_of(r) for r in rows]
        names = sorted(set(methods), key=lambda m: (-methods.count(m), m))
        ref = reference if reference is not None else names[0]
        if ref not in names:
            raise SpecError("--reference", ref, f"no such method in the data; methods: {', '.join(names)}")
        train = tuple(i for i in everyone if methods[i] == ref)
        for name in [m for m in dict.fromkeys(methods) if m != ref]:
            out.append(Fold(f"fit {ref}, predict {name}", train, held(i for i in everyone if methods[i] == name)))
    elif split == "rows":
        k = folds or 5
        if k > len(everyone):
            raise SpecError("--folds", k, f"more folds than rows ({len(everyone)})")
        order = np.random.default_rng(seed).permutation(len(rows))
        for j in range(k):
            test = set(order[j::k].tolist())
            out.append(Fold(f"rows fold {j + 1}/{k}", tuple(i for i in everyone if i not in test),
                            held(sorted(test))))
    elif split == "size":
        limit = 1 << 20 if cut is None else cut
        sized = [r.message_bytes for r in rows]
        if any(m is None for m in sized):
            raise SpecError("--split", split, "every row needs message_bytes")
        out.append(Fold(f"fit <= {limit:g} bytes, predict larger",
                        tuple(i for i in everyone if sized[i] <= limit),
                        held(i for i in everyone if sized[i] > limit)))
    else:
        key = check_split(split)
        values = [r.point.get(key, KEYS[key].default) for r in rows]
        for value in dict.fromkeys(values):
            out.append(Fold(f"leave out {split} = {value}", tuple(i for i in everyone if values[i] != value),
                            held(i for i in everyone if values[i] == value)))
    out = [f for f in out if f.train and f.test]
    if not out:
        raise SpecError("--split", split, "leaves no fold with both training and held-out rows")
    return out


def with_fitted_values(rows: list[Row], indices, result) -> tuple[list[Row], list[str]]:
    """(rows, targets): the rows `indices` names as a fit (`optimise.FitResult`)
    predicts them, its fitted values and line rates set wherever a row does
    not set the key itself, and the targets any of them measures."""
    values = {**result.line_rates, **result.values}
    out = [dataclasses.replace(rows[i], point={**rows[i].point, **{k: v for k, v in values.items()
                                                                   if k not in rows[i].given}})
           for i in indices]
    return out, [t for t in TARGETS if any(r.targets.get(t) is not None for r in out)]
