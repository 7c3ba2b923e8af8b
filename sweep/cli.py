"""The `ssgd-sweep` command line (DESIGN 4).

Bad input exits with status 2 and one line on stderr naming the key and the
value; no output file is left behind.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sweep.schema import SpecError


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except SpecError as err:
        print(f"ssgd-sweep: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ssgd-sweep: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ssgd-sweep",
        description="Model synchronous data-parallel SGD iterations as a DAG and sweep configurations.")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="evaluate a scenario over its grid and write a netCDF cube")
    run.add_argument("spec", help="scenario file (TOML)")
    run.add_argument("-o", "--output", required=True, help="output netCDF file")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--chunk", type=int, default=None, metavar="N",
                     help="configurations per chunk (default 262144): bounds memory per step")
    run.add_argument("--coordinator", metavar="HOST:PORT", help="jax.distributed coordinator (multi-process)")
    run.add_argument("--num-processes", type=int, default=1, metavar="N", help="processes in the cluster")
    run.add_argument("--process-id", type=int, default=0, metavar="I", help="this process's rank")
    run.set_defaults(handler=_run)

    explain = sub.add_parser("explain", help="one configuration in full: tasks, critical path, breakdown")
    explain.add_argument("spec", help="scenario file (TOML) with a single configuration")
    explain.add_argument("--json", action="store_true", help="print the JSON document alone")
    explain.add_argument("--plot", metavar="OUT.png", help="also draw a Gantt chart of one steady-state iteration")
    explain.add_argument("--trace", metavar="OUT.json",
                         help="also write the timeline as Chrome trace events (Perfetto, chrome://tracing)")
    explain.set_defaults(handler=_explain)

    plot = sub.add_parser("plot", help="quick-look figure of a cube: line, heatmap, facets")
    plot.add_argument("cube", help="netCDF cube written by run or demo")
    plot.add_argument("-o", "--output", help="figure file (default: the cube's name with .png)")
    plot.add_argument("--var", help="variable to draw (default: the first float variable)")
    plot.set_defaults(handler=_plot)

    models = sub.add_parser("models", help="list the model zoo")
    models.add_argument("--json", action="store_true", help="print the zoo as JSON, layer by layer")
    models.set_defaults(handler=_models)

    demo = sub.add_parser("demo", help="run the embedded default study and print a summary")
    demo.add_argument("-o", "--output", help="also write the cube to this netCDF file")
    demo.set_defaults(handler=_demo)

    calibrate = sub.add_parser("calibrate", help="fit scenario keys (e.g. link parameters) to measurements")
    calibrate.add_argument("data", help="CSV: scenario-key columns and a target column "
                                        "(throughput, iteration_time, or allreduce_time with message_bytes)")
    calibrate.add_argument("--fit", action="append", required=True, metavar="KEY",
                           help="key to fit, e.g. inter.bandwidth, or a link table (intra, inter) for all "
                                "its parameters; repeat for several")
    calibrate.add_argument("--base", metavar="SPEC.toml", help="scenario of fixed keys under every row; "
                                                                "its values of fitted keys are the start")
    calibrate.add_argument("-o", "--output", required=True, metavar="FIT.toml", help="fitted scenario to write")
    calibrate.add_argument("--starts", type=int, default=8, help="optimisation starts (default 8)")
    calibrate.add_argument("--steps", type=int, default=1000, help="Adam steps per start (default 1000)")
    calibrate.add_argument("--tail", type=float, default=0.3,
                           help="weight of the largest relative errors in the loss (default 0.3)")
    calibrate.add_argument("--seed", type=int, default=0, help="seed of the jittered starts")
    calibrate.set_defaults(handler=_calibrate)

    predict = sub.add_parser("predict", help="predict throughput, iteration or all-reduce times from a fit")
    predict.add_argument("fit", help="FIT.toml from calibrate (or any scenario of fixed keys)")
    predict.add_argument("query", help="CSV of scenario-key columns, one configuration per row")
    predict.add_argument("-o", "--output", required=True, metavar="OUT.csv",
                         help="the query with predicted_<target> columns added")
    predict.set_defaults(handler=_predict)

    validate = sub.add_parser("validate", help="out-of-sample errors of calibrate + predict against naive "
                                               "baselines, by GPU count, method, rows, size or any key")
    validate.add_argument("data", help="CSV as for calibrate, optionally with a free-text `method` column")
    validate.add_argument("--fit", action="append", required=True, metavar="KEY", help="as for calibrate")
    validate.add_argument("--base", metavar="SPEC.toml", help="as for calibrate")
    validate.add_argument("--split", required=True, metavar="gpus|method|rows|size|KEY",
                          help="what is held out: larger GPU counts, other methods, K folds of rows, "
                               "larger messages, or each value of a scenario key in turn")
    validate.add_argument("--folds", type=int, metavar="K", help="folds (rows: default 5; gpus: the K largest cuts)")
    validate.add_argument("--cut", type=float, metavar="X", help="gpus: train on <= X workers; size: on <= X bytes "
                                                                 "(default 1 MiB)")
    validate.add_argument("--reference", metavar="METHOD", help="method: the method to fit (default: most rows)")
    validate.add_argument("--min-gpus", type=int, metavar="N", help="hold out only rows with >= N workers")
    validate.add_argument("--format", choices=("csv", "nccl-tests", "nccl-tests-csv", "osu"),
                          help="the data's format (default: detected from its first lines)")
    validate.add_argument("-o", "--output", metavar="OUT.csv", help="every held-out observation with its errors")
    validate.add_argument("--table", metavar="OUT.md", help="the summary table as markdown")
    validate.add_argument("--starts", type=int, default=8, help="optimisation starts (default 8)")
    validate.add_argument("--steps", type=int, default=1000, help="Adam steps per start (default 1000)")
    validate.add_argument("--tail", type=float, default=0.3, help="as for calibrate (default 0.3)")
    validate.add_argument("--seed", type=int, default=0, help="seed of the starts and of the rows split")
    validate.set_defaults(handler=_validate)
    return parser


def _check_output(path: str) -> Path:
    out = Path(path)
    if out.is_dir():
        raise SpecError("output", path, "is a directory")
    if not out.parent.resolve().is_dir():
        raise SpecError("output", path, "its directory does not exist")
    return out


def _run(args) -> int:
    import sweep
    from sweep.spec import load_spec

    output = _check_output(args.output)
    if args.chunk is not None and args.chunk < 1:
        raise SpecError("--chunk", args.chunk, "must be >= 1")
    spec = load_spec(args.spec)
    if args.coordinator:
        from sweep.devices import join_cluster
        join_cluster(args.coordinator, args.num_processes, args.process_id)
    elif args.num_processes != 1:
        raise SpecError("--coordinator", None, "required with --num-processes > 1")

    def log(message):
        if not args.quiet:
            print(f"ssgd-sweep: {message}", file=sys.stderr)

    try:
        sweep.run(spec, output, chunk=args.chunk, quiet=args.quiet, log=log, open_result=False)
    except KeyboardInterrupt:
        print(f"ssgd-sweep: interrupted; run the same command again to resume into {output}", file=sys.stderr)
        return 130
    import jax

    if jax.process_index() == 0:
        log(f"wrote {output}: {spec.size:,} configurations, dims {dict(zip(spec.dims, spec.shape))}, "
            f"{jax.device_count()} device(s)")
    return 0


def _explain(args) -> int:
    from sweep.explain import explain, format_explain
    from sweep.report import FIGURE_SUFFIXES, check_output
    from sweep.spec import load_spec

    # Check every output before the work, so bad paths fail fast and write nothing.
    plot = check_output("--plot", args.plot, FIGURE_SUFFIXES) if args.plot else None
    trace = check_output("--trace", args.trace, (".json",)) if args.trace else None
    doc = explain(load_spec(args.spec))
    if plot:
        from sweep.gantt import plot_gantt

        plot_gantt(doc, plot)
        print(f"wrote {plot}", file=sys.stderr)
    if trace:
        from sweep.chrome_trace import write_trace

        write_trace(doc, trace)
        print(f"wrote {trace}", file=sys.stderr)
    print(json.dumps(doc) if args.json else format_explain(doc))
    return 0


def _plot(args) -> int:
    from sweep.quicklook import plot_cube

    written, notes = plot_cube(args.cube, args.output, args.var)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {written}", file=sys.stderr)
    return 0


def _models(args) -> int:
    from sweep import zoo

    models = [zoo.get_model(name) for name in zoo.MODEL_NAMES]
    if args.json:
        print(json.dumps({m.name: {
            "params": m.params,
            "forward_flops": m.forward_flops,
            "seq_len": m.seq_len,
            "input_bytes": m.input_bytes,
            "layers": [{"name": l.name, "params": l.params, "forward_flops": l.forward_flops} for l in m.layers],
        } for m in models}))
        return 0
    print(f"{'model':<14} {'params':>15} {'fwd GFLOP/sample':>17} {'layers':>7} {'seq_len':>8}")
    for m in models:
        print(f"{m.name:<14} {m.params:>15,} {m.forward_flops / 1e9:>17.2f} {len(m.layers):>7} "
              f"{m.seq_len if m.seq_len else '-':>8}")
    return 0


def _calibrate(args) -> int:
    from sweep.calibrate import Options, calibrate, summary

    output = _check_output(args.output)
    for name in ("starts", "steps"):
        if getattr(args, name) < 1:
            raise SpecError(f"--{name}", getattr(args, name), "must be >= 1")
    if not args.tail >= 0:
        raise SpecError("--tail", args.tail, "must be >= 0")
    options = Options(starts=args.starts, steps=args.steps, tail=args.tail, seed=args.seed)
    result, _ = calibrate(args.data, args.fit, args.base, output, options)
    print(summary(result), file=sys.stderr)
    print(f"wrote {output}", file=sys.stderr)
    return 0


def _predict(args) -> int:
    from sweep.predict import write_predictions

    output = _check_output(args.output)
    count = write_predictions(args.fit, args.query, output)
    print(f"wrote {output}: {count} rows", file=sys.stderr)
    return 0


def _validate(args) -> int:
    from sweep.calibrate import Options, write_atomic
    from sweep.validate import markdown, records_csv, validate

    outputs = [_check_output(p) for p in (args.output, args.table) if p]
    for name in ("starts", "steps", "folds", "min_gpus"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SpecError(f"--{name.replace('_', '-')}", value, "must be >= 1")
    if args.cut is not None and not args.cut > 0:
        raise SpecError("--cut", args.cut, "must be > 0")
    options = Options(starts=args.starts, steps=args.steps, tail=args.tail, seed=args.seed)
    results = validate(args.data, args.fit, args.base, args.split, args.folds, args.cut, args.reference,
                       args.min_gpus, options, log=lambda m: print(f"ssgd-sweep: {m}", file=sys.stderr),
                       fmt=args.format)
    table = markdown(results)
    if args.output:
        write_atomic(outputs[0], records_csv(results))
    if args.table:
        write_atomic(outputs[-1], table)
    print(table)
    return 0


def _demo(args) -> int:
    import tomllib

    import sweep
    from sweep.demo import DEMO_SCENARIO, summarize

    output = _check_output(args.output) if args.output else None
    cube = sweep.run(tomllib.loads(DEMO_SCENARIO), output)
    print(summarize(cube))
    if output:
        print(f"\nwrote {output}", file=sys.stderr)
    return 0
