"""Fitting the model to measurements, and predicting and validating with the fit.

Owns reading measured rows and base scenarios (`data`), measurement files as
the benchmarks print them (`measurements`), grouping rows by DAG structure
and evaluating them (`model`), the bounded optax fit with switch snapping
(`optimise`), uncertainty and prediction intervals (`uncertainty`), the wire
lower bound every fit is checked against (`wire`), and the three commands'
documents: `calibrate`, `predict`, `validate`.

May import: `kernels`, `sweep.errors`, `sweep.atomic`, `sweep.scenario`,
`sweep.graph`, `sweep.engine`.

Implementation details: users and `experiments/` import `sweep.__all__`.
"""
__all__: list[str] = []
