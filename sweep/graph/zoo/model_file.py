"""A user's own model: `model = "PATH.csv"` or `"PATH.json"` (DESIGN 2.5).

One layer per row (CSV) or per `layers` entry (JSON), in forward order:

- `name`: the layer's name (unique; `compute.trace` matches on it);
- `params`: trainable parameters (an integer >= 0);
- `forward_flops`: forward FLOPs per sample (>= 0; 2 per multiply-add);
- `output_bytes` (optional, default 0): the layer's output per sample in
  float32, kept for the backward pass (activation memory);
- `input_bytes` (optional): bytes per sample copied to the GPU, the model's
  input. In a CSV it is given on the first row only; in JSON it is a field
  of the model, as `ssgd-sweep models NAME --json` prints it.

The JSON form is exactly what `ssgd-sweep models NAME --json` prints: an
object with one entry, the model's name, holding `layers` and the model's
fields (`params`, `forward_flops` and `activation_bytes` totals are checked
against the layers' sums when present; `seq_len` is recorded). So a zoo
model can be exported, edited and used. Files are read again whenever their
contents change (`file_digest`). A UTF-8 byte-order mark is allowed; a CSV
column given twice is an error.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import os

from .model import Layer, Model
from sweep.errors import SpecError

KEY = "model"
SUFFIXES = (".csv", ".json")
REQUIRED = ("name", "params", "forward_flops")
OPTIONAL = ("output_bytes", "input_bytes")
MODEL_FIELDS = ("layers", "params", "forward_flops", "activation_bytes", "seq_len", "input_bytes")


def is_model_file(name: object) -> bool:
    return isinstance(name, str) and name.lower().endswith(SUFFIXES)


def file_digest(path: str) -> str:
    """sha256 of the model file's contents as on disk now."""
    return hashlib.sha256(_read(path)).hexdigest()


def load_model_file(path: str, seq_len: int | None = None) -> Model:
    """The model a file describes; SpecError (key `model`) naming the file and
    the offending line or field. `seq_len` must be unset or the file's."""
    data = _read(path)
    model = _parse(str(path), hashlib.sha256(data).hexdigest(), data)
    if seq_len is not None and seq_len != model.seq_len:
        held = f"is for seq_len = {model.seq_len}" if model.seq_len else "gives FLOPs per sample for one sequence length"
        raise SpecError("seq_len", seq_len, f"does not apply to the model file {path}: it {held}; "
                                            "edit the file's FLOPs instead")
    return model


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise SpecError(KEY, path, f"cannot read model file ({err.__class__.__name__}: {err.strerror or err})")


@functools.lru_cache(maxsize=64)
def _parse(path: str, digest: str, data: bytes) -> Model:
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as spreadsheet programs write, is allowed
    except UnicodeDecodeError as err:
        raise SpecError(KEY, path, f"not UTF-8 text (byte {err.start})")
    name = os.path.splitext(os.path.basename(path))[0]
    model = _from_json(path, text) if path.lower().endswith(".json") else _from_csv(path, name, text)
    if not model.layers:
        raise SpecError(KEY, path, "has no layers")
    names = [layer.name for layer in model.layers]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise SpecError(KEY, path, f"layer {duplicate!r} appears twice: layer names must be unique")
    if model.params <= 0:
        raise SpecError(KEY, path, "has no parameters: nothing to communicate")
    return model


def _number(path: str, where: str, column: str, raw: object, integer: bool) -> float:
    if isinstance(raw, bool):
        raise SpecError(KEY, path, f"{where}: {column} = {raw!r} is not a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SpecError(KEY, path, f"{where}: {column} = {raw!r} is not a number")
    if not math.isfinite(value) or value < 0:
        raise SpecError(KEY, path, f"{where}: {column} = {raw!r} must be finite and >= 0")
    if integer and value != int(value):
        raise SpecError(KEY, path, f"{where}: {column} = {raw!r} must be an integer")
    return value


def _layer(path: str, where: str, row: dict) -> Layer:
    name = row.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(KEY, path, f"{where}: empty or missing layer name")
    for column in REQUIRED[1:]:
        if row.get(column) in (None, ""):
            raise SpecError(KEY, path, f"{where}: {column} is missing")
    output = row.get("output_bytes")
    return Layer(name.strip(), int(_number(path, where, "params", row["params"], True)),
                 _number(path, where, "forward_flops", row["forward_flops"], False),
                 0.0 if output in (None, "") else _number(path, where, "output_bytes", output, False))


def _from_csv(path: str, name: str, text: str) -> Model:
    reader = csv.DictReader(io.StringIO(text))
    header = [(h or "").strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SpecError(KEY, path, f"CSV needs columns {', '.join(REQUIRED)}; missing {', '.join(missing)}")
    twice = next((c for c in header if header.count(c) > 1), None)
    if twice is not None:
        raise SpecError(KEY, path, f"column {twice!r} given twice in the header")
    unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
    if unknown:
        raise SpecError(KEY, path, f"unknown column {unknown[0]!r}; the columns are {', '.join(REQUIRED + OPTIONAL)}")
    layers, input_bytes = [], 0
    for line, raw in enumerate(reader, start=2):
        if None in raw:
            raise SpecError(KEY, path, f"line {line}: more fields than the header's {len(header)}")
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        where = f"line {line}"
        layers.append(_layer(path, where, row))
        given = row.get("input_bytes", "")
        if given:
            if len(layers) > 1:
                raise SpecError(KEY, path, f"{where}: input_bytes = {given!r}: the model's input is given on the "
                                           "first row only")
            input_bytes = int(_number(path, where, "input_bytes", given, True))
    return Model(name, tuple(layers), input_bytes, None)


def _from_json(path: str, text: str) -> Model:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(KEY, path, f"not valid JSON: {err}")
    if not (isinstance(doc, dict) and len(doc) == 1 and isinstance(next(iter(doc.values())), dict)):
        raise SpecError(KEY, path, "JSON must be one model as `ssgd-sweep models NAME --json` prints it: "
                                   '{"NAME": {"layers": [...], ...}}')
    name, body = next(iter(doc.items()))
    unknown = [k for k in body if k not in MODEL_FIELDS]
    if unknown:
        raise SpecError(KEY, path, f"{name}: unknown field {unknown[0]!r}; the fields are {', '.join(MODEL_FIELDS)}")
    entries = body.get("layers")
    if not isinstance(entries, list):
        raise SpecError(KEY, path, f"{name}: `layers` must be a list of layers")
    layers = []
    for i, entry in enumerate(entries):
        where = f"layers[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(KEY, path, f"{where}: must be an object with {', '.join(REQUIRED)}")
        extra = [k for k in entry if k not in REQUIRED + ("output_bytes",)]
        if extra:
            raise SpecError(KEY, path, f"{where}: unknown field {extra[0]!r}; a layer has "
                                       f"{', '.join(REQUIRED)} and output_bytes")
        layers.append(_layer(path, where, entry))
    input_bytes = body.get("input_bytes")
    input_bytes = 0 if input_bytes is None else int(_number(path, name, "input_bytes", input_bytes, True))
    seq_len = body.get("seq_len")
    if seq_len is not None:
        seq_len = int(_number(path, name, "seq_len", seq_len, True))
    model = Model(name, tuple(layers), input_bytes, seq_len or None)
    for field in ("params", "forward_flops", "activation_bytes"):
        if field in body:
            total = _number(path, name, field, body[field], False)
            derived = getattr(model, field)
            if not math.isclose(total, derived, rel_tol=1e-9):
                raise SpecError(KEY, path, f"{name}: {field} = {body[field]!r} is not the layers' sum ({derived:g}); "
                                           "fix it or leave the total out")
    return model
