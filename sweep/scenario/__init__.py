"""Scenarios: the keys a scenario file may set, and reading one into a `Spec`.

Owns the key schema (`schema`), the catalog of GPUs and links (`catalog`),
framework presets (`presets`), samplers (`sample`), the scenario reader and
its checks (`spec`), the table from numeric keys to kernel parameters
(`parameter_table`) and the names of sensitivity outputs (`sensitivity`).

May import: `kernels` (codes and output names), `sweep.errors`, and
`sweep.graph` for the model names and DAG shape values a key may take.

Implementation details: users and `experiments/` import `sweep.__all__`.
"""
__all__: list[str] = []
