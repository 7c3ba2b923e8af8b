"""README's "Validation against measurements" at a glance quotes the studies'
committed result tables: a study rerun without the README following fails here.

Reads only files in the repository (experiments/results/), so it runs
without ../shared/data.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def markdown_rows(path: Path) -> list[list[str]]:
    """The cells of every table row in a markdown file (header and rule rows included)."""
    return table_cells(path.read_text())


def table_cells(text: str) -> list[list[str]]:
    """The cells of every table row in markdown text (header and rule rows included)."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("|")]


def glance() -> list[str]:
    """The rows of README's at-a-glance table."""
    text = (ROOT / "README.md").read_text()
    start = text.index("At a glance")
    block = text[start:text.index("\n\n", text.index("\n|", start))]
    return [line for line in block.splitlines() if line.startswith("|")]


def task_figures(table: Path, prefix: str) -> str:
    """'median / max %' of the held-out model errors of a validate_ddl task."""
    head, *rows = markdown_rows(table)
    row = next(r for r in rows if r[0].startswith(prefix))
    median, maximum = row[head.index("model median")], row[head.index("model max")]
    return f"{median.removesuffix(' %')} / {maximum}"


@pytest.mark.parametrize("folder, tasks", [
    ("validate_ddl", ("(a) scale-out", "(b) cross-method")),
    ("validate_ddl/wrong_centre_p0.5_t0.3", ("(a) scale-out", "(b) cross-method")),
])
def test_10gbe_figures_are_the_committed_tables(folder, tasks):
    rows = glance()
    for task in tasks:
        figures = task_figures(RESULTS / folder / "table.md", task)
        assert any(figures in row for row in rows), f"README at a glance lacks {task} of {folder}: {figures}"


def test_multi_node_nccl_count_is_the_committed_table():
    """How many multi-node tables NCCL's protocols bring within 15 % median,
    and which, as validate_nccl's table says."""
    head, *rows = markdown_rows(RESULTS / "validate_nccl" / "table.md")
    kind, median = head.index("kind"), head.index("model median")
    nccl = {r[0]: float(r[median].removesuffix(" %")) for r in rows
            if len(r) == len(head) and r[kind] == "multi-node, nccl protocols"}
    within = {name for name, value in nccl.items() if value <= 15.0}
    row = next(r for r in glance() if "nccl-tests, multi-node" in r)
    assert f"{len(within)} of {len(nccl)} tables within 15 % median" in row
    for name in within:
        assert f"{nccl[name]:.1f} %" in row, name


def coverage(rows_of_kind: list[dict]) -> str:
    return f"{100 * sum(r['inside'] == 'True' for r in rows_of_kind) / len(rows_of_kind):.1f} %"


def test_held_out_scatter_coverages_are_the_committed_results():
    """The OSU row's interval coverages, without and with `--interval-split
    nodes`, and the nccl-tests row's, without and with `--held-out-scatter`,
    as the committed tables and records say."""
    import csv

    def all_folds(name):
        head, *rows = markdown_rows(RESULTS / "validate_osu" / name)
        row = next(r for r in rows if r[0] == "all folds")
        return row[next(i for i, h in enumerate(head) if h.startswith("90 % interval coverage"))].split(" (")[0]

    osu = next(r for r in glance() if r.startswith("| OSU all-reduce"))
    assert f"cover {all_folds('table_6keys.md')} held out, {all_folds('table_6keys_interval_split.md')} with" in osu

    def intervals(name):
        """validate_nccl's (d): variant -> (coverage, interval score)."""
        text = (RESULTS / "validate_nccl" / name).read_text()
        _, _, *rows = table_cells(text[text.index("(d) the 90 % intervals"):])  # less header and rule
        return {r[0]: (r[2].split(" (")[0], float(r[3])) for r in rows}

    plain, scatter = intervals("table.md"), intervals("table_held_out_scatter.md")
    row = next(r for r in glance() if "90 % intervals by size" in r)
    nccl = "multi-node, nccl protocols"
    assert f"{plain[nccl][0]}; {scatter[nccl][0]} with" in row
    assert f"{plain['multi-node'][0]} -> {scatter['multi-node'][0]}" in row
    # the records say the same as the tables
    with open(RESULTS / "validate_nccl" / "records_held_out_scatter.csv", newline="") as handle:
        assert coverage([r for r in csv.DictReader(handle) if r["kind"] == nccl]) == scatter[nccl][0]
    # and README's scores, old -> new, in the order of the tables
    text = (ROOT / "README.md").read_text()
    for variant in plain:
        assert f"{plain[variant][1]:.2f} -> {scatter[variant][1]:.2f}" in text.replace("\n", " "), variant
