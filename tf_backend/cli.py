"""`tfb`: A/B comparisons of stock TensorFlow and tf_backend.

  tfb ab --model small_cnn                 bundled model (see tf_backend/zoo.py)
  tfb ab model.keras | tfb ab saved_dir/   a Keras file or a SavedModel (--input-shape 1,224,224,3)
  tfb ab --callable pkg.mod:make           make() -> (fn, inputs); see tf_backend/ab/targets.py
  tfb ab -- python train.py ...            script run twice, TF_BACKEND=0 and TF_BACKEND=1
  tfb bench [--quick] [--only GEMM]        the standing workloads (tf_backend/ab/bench.py)
  tfb zoo [--models mlp,cnn] [--modes eager,function,fit] [--json t.json] [--markdown]
                                           the model-zoo table: match, coverage by count and
                                           time, ours/stock (tf_backend/zoo_report.py)
  tfb conformance [--manifest m.json] -- PYTEST ARGS   a test suite off vs on: regressions,
                                           fixes, hollow passes (tf_backend/conformance.py)
  tfb doctor [--json]                      versions, start-up file, CPU features, threads, BLAS,
                                           caches, GPU: what a bug report needs (tf_backend/
                                           doctor.py); exit 1 when TF_BACKEND=1 cannot work
  tfb cache [--prune] [--max-mb N] [--days D]
                                           the generated kernels' directory: size, modules,
                                           least recent use; --prune removes what the limits
                                           allow (kernels/cache_prune.py)
Exit code: 0, 1 when outputs mismatch or a script fails, 2 on usage errors.
"""
import argparse
import json
import os
import sys
import time

_T0 = time.perf_counter()


def progress_printer(quiet):
    def progress(msg):
        if not quiet:
            sys.stderr.write(f"[tfb {time.perf_counter() - _T0:6.1f}s] {msg}\n")
            sys.stderr.flush()
    return progress


def ab_parser():
    from . import zoo
    p = argparse.ArgumentParser(
        prog="tfb ab", description="Compare stock TensorFlow and tf_backend on one target.",
        epilog="Script mode: tfb ab [options] -- python train.py ARGS (runs it with "
               "TF_BACKEND=0 and =1).")
    t = p.add_argument_group("target (one of)")
    t.add_argument("path", nargs="?", help="a .keras/.h5 file or a SavedModel directory")
    t.add_argument("--model", choices=sorted(zoo.BUILDERS), help="a bundled model")
    t.add_argument("--callable", metavar="MOD:FN",
                   help="FN() returns (fn, inputs); fn(*inputs) returns the outputs")
    i = p.add_argument_group("inputs")
    i.add_argument("--input-shape", action="append", metavar="D0,D1,...",
                   help="shape of an input (repeat per input); default: the model's, with "
                        "--batch filled in")
    i.add_argument("--batch", type=int, default=1, help="batch for a model's unknown batch dim")
    i.add_argument("--signature", help="SavedModel signature (default serving_default)")
    i.add_argument("--seed", type=int, default=0)
    m = p.add_argument_group("measurement")
    m.add_argument("--repeats", type=int,
                   help="timing rounds (default 20; scripts: runs per side, default 1)")
    m.add_argument("--warmup", type=int, default=2, help="untimed calls per arm first")
    m.add_argument("--rewarm", type=int, default=1,
                   help="untimed calls after each side switch (enable() clears dispatch caches)")
    m.add_argument("--modes", default="eager,function", help="eager, function, or both")
    m.add_argument("--no-xla", action="store_true", help="skip the stock XLA arm")
    m.add_argument("--op-times", type=int, default=3, metavar="N",
                   help="calls in the instrumented per-op timing run (0: skip)")
    m.add_argument("--budget", type=float, metavar="S", help="stop timing rounds after S seconds")
    m.add_argument("--reduction-len", type=int, default=4096,
                   help="reduction length for the numerics tolerance of whole-model outputs")
    s = p.add_argument_group("script mode")
    s.add_argument("--timeout", type=float, help="kill a script run after this many seconds")
    s.add_argument("--metric", metavar="REGEX", help="metric names to pick from the last "
                   "'name: value' line (default: loss|acc|accuracy|...)")
    s.add_argument("--echo", action="store_true", help="print each run's output to stderr")
    m.add_argument("--shadow", action="store_true",
                   help="run the target once in shadow mode (every op on ours and TensorFlow's) "
                        "and report the first and worst divergences instead of timing")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write the result document (schema in "
                   "tf_backend/ab/schema.py)")
    o.add_argument("--plot", metavar="PNG", help="latency distributions + per-op breakdown")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _split_script(argv):
    if "--" in argv:
        k = argv.index("--")
        return argv[:k], argv[k + 1:]
    return argv, None


def _write_outputs(args, doc, plot_fn, progress):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, allow_nan=True)
        progress(f"wrote {args.json}")
    if args.plot:
        plot_fn(doc, args.plot)
        progress(f"wrote {args.plot}")


def cmd_ab(argv):
    argv, script_cmd = _split_script(argv)
    p = ab_parser()
    args = p.parse_args(argv)
    targets = [x for x in (args.path, args.model, args.callable) if x]
    if script_cmd is not None:
        if targets or not script_cmd:
            p.error("script mode takes a command after '--' and no other target")
    elif len(targets) != 1:
        p.error("give exactly one target: PATH, --model, --callable, or -- COMMAND")
    modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    if not modes or modes - {"eager", "function"}:
        p.error(f"--modes {args.modes!r}: use eager, function or eager,function")
    progress = progress_printer(args.quiet)
    from .ab import plot, report, schema

    if script_cmd is not None:
        from .ab import script
        echo = (lambda side, text: sys.stderr.write(f"--- {side} output ---\n{text}\n")
                if args.echo else None)
        doc = script.run(script_cmd, args.repeats or 1, args.timeout,
                         args.metric or script.METRIC_NAMES, progress, echo)
        failed = any(r["status"] != "ok" for r in doc["runs"])
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        progress("importing TensorFlow")
        import keras
        import tensorflow as tf

        from .ab import arms, inprocess, targets as tg
        try:
            target = tg.resolve(tf, keras, args)
        except (ValueError, TypeError, KeyError, ImportError, AttributeError, OSError) as e:
            sys.stderr.write(f"tfb ab: {e}\n")
            return 2
        progress(f"target {target.kind} {target.name}")
        if args.shadow:
            return _shadow(tf, target, modes, args, progress)
        opts = inprocess.Options(repeats=args.repeats or 20, warmup=args.warmup,
                                 rewarm=args.rewarm, arms=arms.select(modes, not args.no_xla),
                                 reduction_len=args.reduction_len, op_time_calls=args.op_times,
                                 budget_s=args.budget)
        doc = inprocess.run(tf, target, opts, progress)
        failed = any(n["verdict"] != "ok" for n in doc["numerics"] if n["role"] == "backend")
    schema.validate(doc)
    print(report.ab_text(doc))
    _write_outputs(args, doc, plot.ab, progress)
    return 1 if failed else 0


def _shadow(tf, target, modes, args, progress):
    """Localise a mismatch: run the target in shadow mode, report divergences per op."""
    import tf_backend
    from . import shadow
    tf_backend.enable("shadow")
    tf_backend.reset_stats()
    try:
        if "eager" in modes:
            progress("shadow: eager")
            target.fn(*target.inputs)
        if "function" in modes:
            progress("shadow: tf.function")
            tf.function(target.fn)(*target.inputs)
        rep = shadow.report()
    finally:
        tf_backend.disable()
    print(f"tfb ab --shadow: {target.kind} {target.name}")
    print(shadow.format_report(rep))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "tfb ab --shadow", "target": target.describe(), "shadow": rep},
                      f, indent=1, default=str)
    return 1 if rep["divergences"] else 0


def cmd_bench(argv):
    from .ab import bench
    return bench.main(argv)


def cmd_conformance(argv):
    from . import conformance
    return conformance.main(argv)


def cmd_zoo(argv):
    from . import zoo_report
    return zoo_report.main(argv)


def cmd_doctor(argv):
    from . import doctor
    return doctor.main(argv)


def cmd_cache(argv):
    import kernels
    from kernels import cache_prune
    p = argparse.ArgumentParser(prog="tfb cache", description="the generated kernels' cache "
                                "directory (TF_BACKEND_CACHE_DIR): report, prune")
    p.add_argument("--prune", action="store_true", help="remove modules unused for --days, "
                   "then the least recently used while over --max-mb (never one used within "
                   "the last hour)")
    p.add_argument("--max-mb", type=float, help="size limit (default TF_BACKEND_CACHE_MB, 2048)")
    p.add_argument("--days", type=float, help="age limit (default TF_BACKEND_CACHE_DAYS, 30)")
    a = p.parse_args(argv)
    root = kernels.cache_dir()
    gs = cache_prune.groups(root)
    size = sum(g[1] for g in gs.values())
    now = time.time()
    oldest = max((now - g[0] for g in gs.values()), default=0.0)
    print(f"{root}: {len(gs)} modules, {size / 2**20:.1f} MiB, least recent use "
          f"{oldest / 86400:.1f} days ago")
    if a.prune:
        max_bytes = None if a.max_mb is None else int(a.max_mb * 2**20)
        max_age = None if a.days is None else a.days * 86400
        n, freed, kept = cache_prune.prune(root, max_bytes, max_age)
        print(f"pruned {n} modules, {freed / 2**20:.1f} MiB; {kept / 2**20:.1f} MiB kept")
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = {"ab": cmd_ab, "bench": cmd_bench, "conformance": cmd_conformance,
            "zoo": cmd_zoo, "doctor": cmd_doctor, "cache": cmd_cache}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in cmds:
        sys.stdout.write(__doc__)
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    return cmds[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
