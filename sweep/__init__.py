"""ssgd-sweep: the DAG model of synchronous data-parallel SGD, swept with JAX.

The public API is `__all__`; everything else is an implementation detail
that may change. Names load on first use (PEP 562 `__getattr__`), so that
`import sweep` and the CLI's start-up (help, bad-input errors) do not pay for
importing JAX.

Scenarios and sweeps:
    run(spec, output=None, ...)      evaluate a scenario into a labelled cube
    open_cube(path)                  a cube from its file, sampled names decoded from their codes
    load_spec(source) -> Spec        read and check a scenario (TOML path or mapping)
    SpecError                        what bad input raises: one line, key and value
    explain(spec) / format_explain   one configuration's schedule from the compiled program
    required_inter_bandwidth(spec)   the inter-node bandwidth that reaches a target efficiency
    catalog                          GPUs and links by name (`catalog.LINKS`, `catalog.GPUS`)

Fitting, prediction, validation:
    calibrate(data, keys, ...)       fit keys to measurements; FitOptions, fit_summary
    predict(fit, query)              predictions with intervals from FIT.toml
    validate(data, keys, ...)        out-of-sample errors against the naive baselines;
                                     records_csv, make_folds, run_fold, Fold, fit_document,
                                     interval_score and coverage_text (of held-out
                                     bands), METHOD_COLUMN
                                     (the data column naming each row's method)
    read_base, read_rows, read_measurements   the inputs those commands read

Studies (experiments/): markdown_table, pyplot, save_figure, study_arguments,
study_fit_options, require_data, study_error, write_text, write_dataset.

The kernel alone (benchmarks): prepare_chunk(spec) -> PreparedChunk, and the
DAG types Dag and Task that `explain --json` and the lowering describe.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_HOMES = {
    "run": "sweep.engine.runner",
    "open_cube": "sweep.engine.store",
    "load_spec": "sweep.scenario.spec",
    "Spec": "sweep.scenario.spec",
    "SpecError": "sweep.errors",
    "explain": "sweep.report.explain",
    "format_explain": "sweep.report.explain",
    "required_inter_bandwidth": "sweep.engine.bandwidth_target",
    "calibrate": "sweep.fit.calibrate",
    "fit_summary": "sweep.fit.calibrate",
    "fit_document": "sweep.fit.calibrate",
    "FitOptions": "sweep.fit.optimise",
    "predict": "sweep.fit.predict",
    "validate": "sweep.fit.validate",
    "records_csv": "sweep.fit.validate",
    "interval_score": "sweep.fit.validate",
    "records_interval_score": "sweep.fit.validate",
    "coverage_text": "sweep.fit.validate",
    "make_folds": "sweep.fit.folds",
    "run_fold": "sweep.fit.validate",
    "Fold": "sweep.fit.folds",
    "METHOD_COLUMN": "sweep.fit.folds",
    "read_base": "sweep.fit.data",
    "read_rows": "sweep.fit.data",
    "read_measurements": "sweep.fit.measurements",
    "markdown_table": "sweep.report.files",
    "pyplot": "sweep.report.files",
    "save_figure": "sweep.report.files",
    "study_arguments": "sweep.report.files",
    "study_fit_options": "sweep.report.files",
    "require_data": "sweep.report.files",
    "study_error": "sweep.report.files",
    "write_text": "sweep.atomic",
    "write_dataset": "sweep.atomic",
    "prepare_chunk": "sweep.engine.evaluate",
    "PreparedChunk": "sweep.engine.evaluate",
    "Dag": "sweep.graph.dag",
    "Task": "sweep.graph.dag",
}
_MODULES = {"catalog": "sweep.scenario.catalog"}

__all__ = ["__version__", *_HOMES, *_MODULES]


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:
        raise AttributeError(f"module 'sweep' has no attribute {name!r}")
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
