"""The `ssgd-sweep` command line (DESIGN 4).

Bad input exits with status 2 and one line on stderr naming the key and the
value; no output file is left behind. An output that names an input, or that
cannot be written (read-only, no permission, full disk), is bad input too,
found before the work starts. A full disk during a sweep exits 1, with the
finished chunks journaled for a resume. SIGINT and SIGTERM stop a sweep
between chunks: exit 130 or 143, run the same command again to resume.

Each command imports what it needs inside its handler, on purpose: `--help`
and bad-input errors answer in about 0.05 s, where importing JAX, xarray,
optax and matplotlib up front takes 3.3 s (2-core x86 host).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import warnings
from pathlib import Path

from sweep import __version__
from sweep.atomic import check_output
from sweep.errors import SpecError
from sweep.fit.measurements import FORMATS

# `run` refuses a cube above this size (uncompressed) unless --allow-large.
MAX_CUBE_BYTES = 64 * 2**30
# Seconds per configuration, layer and unrolled iteration on one CPU device,
# by lowering (experiments/BENCHMARKS.md, 2-core x86 host, ResNet-50): the
# contracted stream program at its slowest (mgwfbp and fusion walk the
# channel: 4.9-6.1 M configurations/s) and the unrolled one (layer-wise,
# ZeRO-3: 0.11-0.58 M/s).
SECONDS_PER_TASK = {"contracted": 6e-10, "unrolled": 3e-8}
GPU_SPEEDUP = 30  # a GPU device against one CPU device, roughly


def main(argv: list[str] | None = None, own_process: bool | None = None) -> int:
    """Run one command. `own_process`: whether the command may choose JAX's
    CPU device count for the whole process (`sweep.engine.cpu_devices`);
    by default when it reads the command line itself (`argv` None: the
    `ssgd-sweep` script, `python -m sweep`), so that a caller passing
    `argv` keeps its process's JAX settings whatever ran first."""
    args = _parser().parse_args(argv)
    args.own_process = argv is None if own_process is None else own_process
    if args.own_process and args.handler in _COMPILING:
        from sweep.engine.compile_cache import enable

        enable()  # before the first compile: XLA's programs kept between runs
    from sweep.engine.interrupt import Interrupted
    from sweep.engine.store import write_error

    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return args.handler(args)
    except SpecError as err:
        print(f"ssgd-sweep: error: {err}", file=sys.stderr)
        if getattr(err, "inside_hdf5", False):
            # HDF5 failed mid-write (a full disk it was not warned of): its
            # caches stay dirty and its cleanup at exit would crash. The
            # journal is on disk and the lock released: leave at once.
            sys.stderr.flush()
            os._exit(1 if err.mid_run else 2)
        return 1 if getattr(err, "mid_run", False) else 2
    except Interrupted as stop:
        _settle()
        print("ssgd-sweep: interrupted; run the same command again to resume", file=sys.stderr)
        return stop.status
    except KeyboardInterrupt:
        print("ssgd-sweep: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's
        # final flush of stdout from raising again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as err:
        converted = write_error(getattr(err, "filename", None) or "output", err)
        if converted is err:
            raise
        print(f"ssgd-sweep: error: {converted}", file=sys.stderr)
        return 2


def _settle() -> None:
    """Let a chunk still computing on the devices finish (its results are
    dropped), so the process never exits under a running computation."""
    if "jax" not in sys.modules:
        return
    import jax

    for array in jax.live_arrays():
        try:
            array.block_until_ready()
        except Exception:
            pass


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"ssgd-sweep: warning: {message}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors in the tool's one line (status 2), not the
    usage block: `ssgd-sweep: error: argument --chunk: invalid int value: 'x'`."""

    def error(self, message):
        self.exit(2, f"ssgd-sweep: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ssgd-sweep",
        description="Model synchronous data-parallel SGD iterations as a DAG and sweep configurations.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="evaluate a scenario over its grid and write a netCDF cube")
    run.add_argument("spec", help="scenario file (TOML)")
    run.add_argument("-o", "--output", required=True, help="output netCDF file")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--chunk", type=int, default=None, metavar="N",
                     help="configurations per chunk (default 262144 on CPUs, 16777216 on GPUs): bounds memory per step")
    run.add_argument("--coordinator", metavar="HOST:PORT", help="jax.distributed coordinator (multi-process)")
    run.add_argument("--num-processes", type=int, default=1, metavar="N", help="processes in the cluster")
    run.add_argument("--process-id", type=int, default=0, metavar="I", help="this process's rank")
    run.add_argument("--coordinator-timeout", type=float, default=60.0, metavar="S",
                     help="seconds to reach the coordinator and the other processes (default 60)")
    run.add_argument("--allow-large", action="store_true",
                     help=f"start even if the cube (uncompressed) exceeds {MAX_CUBE_BYTES / 2**30:.0f} GiB "
                          "or the free disk space")
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
    models.add_argument("names", nargs="*", metavar="NAME",
                        help="only these models (a zoo name or a model file); one model's --json is a model file")
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
    _format_argument(calibrate)
    _interval_split_argument(calibrate)
    _optimiser_arguments(calibrate, "seed of the jittered starts")
    calibrate.set_defaults(handler=_calibrate)

    predict = sub.add_parser("predict", help="predict throughput, iteration or all-reduce times from a fit")
    predict.add_argument("fit", help="FIT.toml from calibrate (or any scenario of fixed keys)")
    predict.add_argument("query", help="CSV of scenario-key columns, one configuration per row")
    predict.add_argument("-o", "--output", required=True, metavar="OUT.csv",
                         help="the query with predicted_<target> columns added")
    _format_argument(predict, "the query's")
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
    _format_argument(validate)
    _interval_split_argument(validate)
    validate.add_argument("-o", "--output", metavar="OUT.csv", help="every held-out observation with its errors")
    validate.add_argument("--table", metavar="OUT.md", help="the summary table as markdown")
    _optimiser_arguments(validate, "seed of the starts and of the rows split")
    validate.set_defaults(handler=_validate)
    return parser


def _format_argument(parser, whose: str = "the data's") -> None:
    """--format: a benchmark file's format where its banner was cut, shared by
    calibrate, predict and validate."""
    parser.add_argument("--format", choices=FORMATS,
                        help=f"{whose} format (default: detected from its first lines)")


def _interval_split_argument(parser) -> None:
    """--interval-split: the intervals' scatter from rows held out of refits
    (sweep.fit.conformal), shared by calibrate and validate."""
    parser.add_argument("--interval-split", metavar="gpus|method|rows|size|KEY",
                        help="widen the 90 %% intervals to the errors of rows held out of refits split this way "
                             "(as validate --split, with its defaults; one refit per fold): for predictions "
                             "across process counts or methods the fit never saw (default: in-sample scatter)")


def _optimiser_arguments(parser, seed_help: str) -> None:
    """The fit's optimiser options, shared by calibrate and validate."""
    from sweep.fit.options import FitOptions

    defaults = FitOptions()
    parser.add_argument("--starts", type=int, default=defaults.starts,
                        help=f"optimisation starts (default {defaults.starts})")
    parser.add_argument("--steps", type=int, default=defaults.steps,
                        help=f"Adam steps per start while the smoothing anneals (default {defaults.steps})")
    parser.add_argument("--polish", type=int, default=defaults.polish,
                        help=f"Adam steps per start after it, with hard switches (default {defaults.polish})")
    parser.add_argument("--tail", type=float, default=defaults.tail,
                        help=f"weight of the largest relative errors in the loss (default {defaults.tail})")
    parser.add_argument("--prior", type=float, default=defaults.prior, metavar="SIGMA",
                        help="strength of the priors around the base or catalog values: the residual scale "
                             "assumed when weighing them against the data; larger trusts the catalog more, "
                             f"0 turns them off (default {defaults.prior}, chosen by experiments/choose_prior.py)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help=seed_help)


def _fit_options(args):
    """FitOptions from the optimiser arguments, each checked (exit 2 naming it)."""
    from sweep.fit.options import FitOptions

    for name in ("starts", "steps"):
        if getattr(args, name) < 1:
            raise SpecError(f"--{name}", getattr(args, name), "must be >= 1")
    for name in ("polish", "seed"):
        if getattr(args, name) < 0:
            raise SpecError(f"--{name}", getattr(args, name), "must be >= 0")
    for name in ("tail", "prior"):
        value = getattr(args, name)
        if not (value >= 0 and math.isfinite(value)):
            raise SpecError(f"--{name}", value, "must be a finite number >= 0")
    return FitOptions(starts=args.starts, steps=args.steps, polish=args.polish, tail=args.tail, prior=args.prior,
                      seed=args.seed)


def _check_output(path: str, key: str = "--output", inputs=None, probe: bool = True) -> Path:
    """`path` as a Path, or SpecError before any work: a directory, a missing
    folder, an input of the command (`inputs`: what -> path, or (what, path)
    pairs; links resolved), or a place where nothing can be written."""
    out = check_output(key, path)
    for what, source in (inputs.items() if isinstance(inputs, dict) else inputs or ()):
        if source is not None and _same_file(out, Path(source)):
            raise SpecError(key, path, f"is the {what} ({source}); an output never replaces an input, "
                                       "choose another file")
    if probe:
        _probe_writable(out, key)
    return out


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _probe_writable(out: Path, key: str) -> None:
    """Create and remove a file beside `out` (as the atomic write will), and
    check an existing `out` may be replaced: fail now, not after the work."""
    from sweep.engine.store import write_error

    probe = out.with_name(f".{out.name}.{os.getpid()}.probe")
    try:
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            err.filename = f"in {out.parent}"  # (name the folder, not the probe)
            raise
        if out.exists():  # an immutable file cannot be replaced: setting its times as they are fails
            st = out.stat()
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError as err:
        if probe.exists():
            probe.unlink()
        converted = write_error(out, err)
        reason = converted.reason if converted is not err else f"cannot write there ({err.strerror or err})"
        raise SpecError(key, str(out), reason) from None


def _inputs_of_spec(spec_path: str, spec) -> list[tuple[str, str]]:
    """(what, path) of every file a scenario reads."""
    return [("scenario", spec_path)] + [("compute.trace file", t) for t in spec.values("compute.trace")
                                         if t is not None]


def _run(args) -> int:
    from sweep.engine.interrupt import check_all, deferred_signals

    with deferred_signals():  # Ctrl-C and SIGTERM stop between chunks (sweep.engine.interrupt)
        return _run_sweep(args, check_all)


def _run_sweep(args, check) -> int:
    import sweep
    from sweep.engine.cpu_devices import use_every_core
    from sweep.scenario.spec import load_spec

    _check_output(args.output, inputs={"scenario": args.spec}, probe=False)
    if args.chunk is not None and args.chunk < 1:
        raise SpecError("--chunk", args.chunk, "must be >= 1")
    if not args.coordinator_timeout > 0:
        raise SpecError("--coordinator-timeout", args.coordinator_timeout, "must be > 0")
    spec = load_spec(args.spec)
    if args.own_process:
        use_every_core()  # before JAX starts: one CPU device per core
    output = Path(args.output)
    inputs = _inputs_of_spec(args.spec, spec)
    for derived in ("", ".partial", ".partial.json", ".partial.npz", ".lock"):
        _check_output(str(output) + derived, "--output", inputs, probe=False)
    _check_output(args.output, inputs=inputs)
    if args.coordinator:
        from sweep.engine.devices import join_cluster
        join_cluster(args.coordinator, args.num_processes, args.process_id, args.coordinator_timeout)
    elif args.num_processes != 1:
        raise SpecError("--coordinator", None, "required with --num-processes > 1")
    import jax

    leader = jax.process_index() == 0
    done = []

    def log(message):
        if message.endswith("nothing to do"):
            done.append(message)
        routine = message.startswith(("resuming", "wrote")) or "on this machine" in message
        if leader and not (args.quiet and routine):
            print(f"ssgd-sweep: {message}", file=sys.stderr)

    from sweep.engine.store import OutputLock

    lock = OutputLock(output) if leader else None  # one writer per output, for the whole run
    try:
        _estimate(spec, args.chunk, output, args.allow_large, log)
        check()  # a signal during the preparations: stop before the first chunk
        sweep.run(spec, output, chunk=args.chunk, quiet=args.quiet, log=log, open_result=False, lock=lock)
    finally:
        if lock is not None:
            lock.release()  # (the store released it already, unless it never started)
    if not done:
        dims = {d: n for d, n in zip(spec.dims, spec.shape) if spec.reduce is None or d not in spec.reduce.over}
        reduced = f" reduced over {', '.join(spec.reduce.over)}" if spec.reduce is not None else ""
        log(f"wrote {output}: {spec.size:,} configurations{reduced}, dims {dims}, "
            f"{jax.device_count()} device(s)")
    return 0


def _estimate(spec, chunk, output: Path, allow_large: bool, log) -> None:
    """One line before the work of more than one chunk: configurations, time,
    cube size; a cube beyond the free disk space or MAX_CUBE_BYTES is refused
    (unless --allow-large)."""
    import jax

    from sweep.graph import zoo
    from sweep.engine.evaluate import default_chunk
    from sweep.engine.plan import Plan
    from sweep.engine.store import SPACE_MARGIN, estimate_bytes, make_layout
    from sweep.scenario.spec import model_combinations

    devices = jax.devices()
    plan = Plan(spec, chunk or default_chunk({d.platform for d in devices}), multiple=len(devices))
    if spec.reduce is not None:
        from sweep.engine.reducer import check_reduction, result_bytes
        check_reduction(spec)
        size_bytes = result_bytes(spec)
    else:
        size_bytes = estimate_bytes(make_layout(spec, len(devices), plan.disk_chunks()))
    layers = max(len(zoo.model_of(values).layers) for values in model_combinations(spec))
    iterations = max(spec.values("iterations"))
    speed = sum(GPU_SPEEDUP if d.platform == "gpu" else 1 for d in devices)
    if all(d.platform == "cpu" for d in devices):
        speed = min(speed, os.cpu_count() or 1)
    from sweep.engine.plan import structural_groups
    from sweep.graph.compiler import compile_structure

    per_task = max(SECONDS_PER_TASK[compile_structure(structure).lowered.mode]
                   for structure, _ in structural_groups(spec))
    seconds = spec.size * layers * iterations * per_task / speed
    line = (f"{spec.size:,} configurations, about {_duration(seconds)} on this machine "
            f"({len(devices)} {devices[0].platform} device(s)), cube up to {_bytes(size_bytes)}")
    free = shutil.disk_usage(output.resolve().parent).free
    if free < SPACE_MARGIN:
        raise SpecError("--output", str(output), f"no space left on the device ({_bytes(free)} free in "
                                                 f"{output.resolve().parent})")
    if not allow_large:
        if size_bytes > MAX_CUBE_BYTES:
            raise SpecError("scenario", f"{spec.size:,} configurations",
                            f"the cube would take up to {_bytes(size_bytes)} (uncompressed), beyond the "
                            f"{MAX_CUBE_BYTES / 2**30:.0f} GiB limit, and about {_duration(seconds)}; sweep fewer "
                            "configurations or pass --allow-large")
        if size_bytes > free:
            raise SpecError("--output", str(output), f"the cube needs up to {_bytes(size_bytes)} (uncompressed) "
                                                     f"and {output.resolve().parent} has {_bytes(free)} free; "
                                                     "choose another place, a smaller scenario, or pass "
                                                     "--allow-large")
    if plan.num_chunks > 1:  # (a single chunk is done in about the time it takes to read this)
        log(line)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{max(seconds, 1):.0f} s"


def _bytes(n: float) -> str:
    for unit in ("TB", "GB", "MB", "kB"):
        scale = {"TB": 1e12, "GB": 1e9, "MB": 1e6, "kB": 1e3}[unit]
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:.0f} B"


def _explain(args) -> int:
    from sweep.report.explain import explain, format_explain
    from sweep.report.files import FIGURE_SUFFIXES
    from sweep.scenario.spec import load_spec

    # Check every output before the work, so bad paths fail fast and write nothing.
    plot = check_output("--plot", args.plot, FIGURE_SUFFIXES) if args.plot else None
    trace = check_output("--trace", args.trace, (".json",)) if args.trace else None
    spec = load_spec(args.spec)
    if spec.sample is not None:
        raise SpecError("sample", f"n = {spec.sample.n}", "explain shows one configuration; remove the [sample] "
                                                         "table (or use run for a sampled sweep)")
    inputs = _inputs_of_spec(args.spec, spec)
    for key, path in (("--plot", plot), ("--trace", trace)):
        if path is not None:
            _check_output(str(path), key, inputs)
    if plot and trace and _same_file(plot, trace):
        raise SpecError("--trace", str(trace), "is also the --plot file")
    doc = explain(spec)
    if plot:
        from sweep.report.gantt import plot_gantt

        plot_gantt(doc, plot)
        print(f"wrote {plot}", file=sys.stderr)
    if trace:
        from sweep.report.chrome_trace import write_trace

        write_trace(doc, trace)
        print(f"wrote {trace}", file=sys.stderr)
    print(json.dumps(doc) if args.json else format_explain(doc))
    return 0


def _plot(args) -> int:
    from sweep.report.quicklook import plot_cube

    # The figure goes next to the cube unless -o says otherwise: check that place before drawing.
    _check_output(args.output or str(Path(args.cube).with_suffix(".png")), "-o", {"cube": args.cube})

    written, notes = plot_cube(args.cube, args.output, args.var)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {written}", file=sys.stderr)
    return 0


def _models(args) -> int:
    from sweep.graph import zoo

    from sweep.errors import SpecError, closest

    for name in args.names:
        if not zoo.is_model_file(name) and name not in zoo.MODEL_NAMES:
            raise SpecError("model", name, f"unknown model; {closest(name, zoo.MODEL_NAMES, 'ssgd-sweep models')}")
    models = [zoo.get_model(name) for name in args.names or zoo.MODEL_NAMES]
    if args.json:
        # The fields `sweep.graph.zoo.model_file` reads back: one entry is a model file.
        print(json.dumps({m.name: {
            "params": m.params,
            "forward_flops": m.forward_flops,
            "activation_bytes": m.activation_bytes,
            "seq_len": m.seq_len,
            "input_bytes": m.input_bytes,
            "layers": [{"name": l.name, "params": l.params, "forward_flops": l.forward_flops,
                        "output_bytes": l.output_bytes} for l in m.layers],
        } for m in models}))
        return 0
    print(f"{'model':<14} {'params':>15} {'fwd GFLOP/sample':>17} {'layers':>7} {'seq_len':>8}")
    for m in models:
        print(f"{m.name:<14} {m.params:>15,} {m.forward_flops / 1e9:>17.2f} {len(m.layers):>7} "
              f"{m.seq_len if m.seq_len else '-':>8}")
    return 0


def _calibrate(args) -> int:
    from sweep.fit.calibrate import calibrate, fit_summary

    output = _check_output(args.output, inputs={"data": args.data, "base scenario": args.base})
    options = _fit_options(args)
    result, _ = calibrate(args.data, args.fit, args.base, output, options, fmt=args.format,
                          log=lambda message: print(f"ssgd-sweep: {message}", file=sys.stderr, flush=True),
                          interval_split=args.interval_split)
    print(fit_summary(result), file=sys.stderr)
    print(f"wrote {output}", file=sys.stderr)
    return 0


def _predict(args) -> int:
    from sweep.fit.predict import write_predictions

    output = _check_output(args.output, inputs={"fit": args.fit, "query": args.query})
    count = write_predictions(args.fit, args.query, output, args.format)
    print(f"wrote {output}: {count} rows", file=sys.stderr)
    return 0


def _validate(args) -> int:
    from sweep.atomic import write_text
    from sweep.fit.validate import HEADER, records_csv, summary_rows, validate
    from sweep.report.files import markdown_table

    inputs = {"data": args.data, "base scenario": args.base}
    outputs = [_check_output(path, flag, inputs) for path, flag in ((args.output, "--output"), (args.table, "--table"))
               if path]
    if len(outputs) == 2 and _same_file(*outputs):
        raise SpecError("--table", args.table, "is also the --output file; choose another file")
    for name in ("folds", "min_gpus"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SpecError(f"--{name.replace('_', '-')}", value, "must be >= 1")
    if args.cut is not None and not args.cut > 0:
        raise SpecError("--cut", args.cut, "must be > 0")
    options = _fit_options(args)
    results = validate(args.data, args.fit, args.base, args.split, args.folds, args.cut, args.reference,
                       args.min_gpus, options, log=lambda m: print(f"ssgd-sweep: {m}", file=sys.stderr),
                       fmt=args.format, interval_split=args.interval_split)
    table = markdown_table(HEADER, summary_rows(results))
    if args.output:
        write_text(outputs[0], records_csv(results))
    if args.table:
        write_text(outputs[-1], table)
    print(table)
    return 0


def _demo(args) -> int:
    import tomllib

    import sweep
    from sweep.report.demo import DEMO_SCENARIO, summarize

    output = _check_output(args.output) if args.output else None
    cube = sweep.run(tomllib.loads(DEMO_SCENARIO), output)
    print(summarize(cube))
    if output:
        print(f"\nwrote {output}", file=sys.stderr)
    return 0


# The commands that compile JAX programs, and so read and fill the compile cache.
_COMPILING = (_run, _explain, _calibrate, _predict, _validate, _demo)
