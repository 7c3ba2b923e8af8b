"""What users read: explanations, timelines, plots and study files.

Owns `explain` (one configuration's schedule from the compiled program),
Gantt charts and Chrome traces of it (`gantt`, `chrome_trace`), quick-look
plots of a cube (`quicklook`), the demo study (`demo`) and the helpers the
studies in `experiments/` write their figures and tables with (`files`).

May import every other part of `sweep`; nothing imports it but the CLI and
the public API.

Implementation details: users and `experiments/` import `sweep.__all__`.
"""
__all__: list[str] = []
