"""`tfb zoo`: the model-zoo table: each bundled model x mode, stock vs tf_backend.

  tfb zoo [--models mlp,cnn] [--modes eager,function,fit] [--json out.json] [--markdown]

Modes (same seed, same data on both sides; a fresh model per side):
  eager     model(x, training=False), called eagerly
  function  tf.function(lambda x: model(x, training=False)) (inference through our programs)
  fit       model.fit for a few steps (SGD, Keras' compiled train function, batch `batch`), then
            model.evaluate on the same data
Per cell:
  match     outputs (eager/function), or fit losses, evaluate loss and every updated weight
            (BatchNorm moving statistics included), within numerics.compare's "reduction"
            tolerance for the model's reduction length (DESIGN.md §6): "yes".
            fit only, when that fails: stock's own spread decides ("spread"). Stock runs the same
            fit three more times: eagerly (run_eagerly=True), with oneDNN off
            (TF_ENABLE_ONEDNN_OPTS=0: Eigen kernels) and in float64 (its own rounding error);
            every value that fails the tolerance must satisfy numerics.within_spread:
            ||ours - stock|| <= SPREAD_K x the largest of stock's three distances + the
            tolerance's norm. Untrained BatchNorm networks (ResNet-50,
            MobileNetV2, DenseNet-121) amplify rounding in the backward pass: stock's own
            alternatives disagree by percents after one step (numerics.py).
  coverage  share of executed compute ops on our kernels, by count (the ledger, one warm call)
            and by time (the per-op / per-node trace spans of that same call). Not compute ops,
            and excluded: ops with resource/variant/string arguments (variable reads/writes,
            iterators, optionals), NoOp, and function-call ops (their bodies are counted).
            Control-flow nodes (If/While/Case) are containers: their bodies' nodes are counted.
  ratio     ours / stock: median time of `repeats` calls after warm-up.
"""
import json
import os
import statistics
import sys
import time

import numpy as np

from .tf_adapter import GROUP_NODE_OP

MODES = ("eager", "function", "fit")
ISSUE_MODELS = ("mlp", "cnn", "resnet50", "mobilenetv2", "densenet121", "transformer", "lstm")
CI_MODELS = ("small_mlp", "small_cnn", "resnet_block")

EXCLUDED_DOC = ("compute ops exclude state ops (resource/variant/string arguments: variable "
                "reads/writes, iterators, optionals), NoOp and function-call ops (bodies counted)")


class Spec:
    """How a model is run: batch, fit steps, timed calls, reduction length for the tolerance."""

    def __init__(self, batch, steps=2, repeats=5, reduction_len=4096):
        self.batch, self.steps, self.repeats, self.reduction_len = batch, steps, repeats, \
            reduction_len


SPECS = {
    "small_mlp": Spec(16, steps=3, repeats=7),
    "mlp": Spec(16, steps=3, repeats=7),
    "small_cnn": Spec(8, steps=3, repeats=7),
    "cnn": Spec(8, steps=3, repeats=5),
    "resnet_block": Spec(4, steps=3, repeats=5),
    "resnet50": Spec(2, steps=2, repeats=3, reduction_len=1 << 16),
    "mobilenetv2": Spec(2, steps=2, repeats=3, reduction_len=1 << 16),
    "densenet121": Spec(2, steps=2, repeats=3, reduction_len=1 << 16),
    "transformer": Spec(2, steps=2, repeats=5, reduction_len=1 << 14),
    "lstm": Spec(4, steps=2, repeats=3, reduction_len=1 << 14),
}


def spec_for(name):
    return SPECS.get(name, Spec(4))


# --- what counts as a compute op -------------------------------------------------------------
_CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall", "NoOp"}
_excluded_cache = {}


def excluded(op):
    """True for ops that are not compute: state (resource/variant/string args), NoOp, calls."""
    r = _excluded_cache.get(op)
    if r is None:
        if (op in _CALL_OPS or op.startswith("__inference") or op.startswith("__forward")
                or op == GROUP_NODE_OP):   # variable ops in one call (passes/stock_runs.py)
            r = True
        else:
            from . import dispatch
            try:
                r = bool(dispatch._touches_state(op))
            except Exception:  # not an op TensorFlow knows: count it
                r = False
        _excluded_cache[op] = r
    return r


def coverage(stats, events, whole=None):
    """Coverage by count (ledger snapshot) and by time (trace events) over compute ops.

    whole: {function name: {"reason", "calls", "seconds", "ops": {op: n}}} for tf.functions
    that ran whole on TensorFlow (see measure()).
    Returns {"count", "time", "ops": {op: {backend, fallback, reasons, backend_s, fallback_s}},
    "excluded": {op: calls}, "fallbacks": [...], "whole_functions": whole}.
    """
    ops, excl = {}, {}
    for op, o in stats["ops"].items():
        if excluded(op):
            excl[op] = o["backend"] + o["fallback"]
            continue
        ops[op] = {"backend": o["backend"], "fallback": o["fallback"],
                   "reasons": dict(o["reasons"]), "backend_s": 0.0, "fallback_s": 0.0}
    for e in events:
        cat, a = e["cat"], e["args"]
        if cat not in ("eager", "node") or a.get("kind") in ("if", "while", "case", "noop"):
            continue
        name = a.get("op") or e["name"]
        if isinstance(name, bytes):
            name = name.decode()
        if excluded(name):
            continue
        o = ops.setdefault(name, {"backend": 0, "fallback": 0, "reasons": {}, "backend_s": 0.0,
                                  "fallback_s": 0.0})
        path = a.get("path")
        if a.get("kind") == "fused":   # a generated loop over several table ops: ours
            path = "backend"
        o["backend_s" if path == "backend" else "fallback_s"] += e["dur"] * 1e-6
    for name, f in (whole or {}).items():
        reason = f"whole_function:{f['reason']}"
        for op, n in f["ops"].items():
            o = ops.setdefault(op, {"backend": 0, "fallback": 0, "reasons": {},
                                    "backend_s": 0.0, "fallback_s": 0.0})
            o["fallback"] += n * f["calls"]
            o["reasons"][reason] = o["reasons"].get(reason, 0) + n * f["calls"]
        o = ops.setdefault(f"<{name} on TensorFlow>", {"backend": 0, "fallback": 0,
                                                        "reasons": {reason: f["calls"]},
                                                        "backend_s": 0.0, "fallback_s": 0.0})
        o["fallback_s"] += f["seconds"]
    for o in ops.values():
        # an owned op that bounced from the fast path and then fell back: its (tiny) fast-path
        # span says "backend"; with no backend call in the ledger, it is all fallback time
        if o["backend"] == 0 and o["fallback"] > 0 and o["backend_s"]:
            o["fallback_s"] += o["backend_s"]
            o["backend_s"] = 0.0
    nb = sum(o["backend"] for o in ops.values())
    nf = sum(o["fallback"] for o in ops.values())
    tb = sum(o["backend_s"] for o in ops.values())
    tf_ = sum(o["fallback_s"] for o in ops.values())
    fallbacks = sorted(({"op": op, "calls": o["fallback"], "reasons": o["reasons"],
                         "seconds": round(o["fallback_s"], 6)}
                        for op, o in ops.items() if o["fallback"] or o["fallback_s"] > 0),
                       key=lambda f: (-f["seconds"], -f["calls"]))
    return {"count": nb / (nb + nf) if nb + nf else None,
            "time": tb / (tb + tf_) if tb + tf_ else None,
            "calls": {"backend": nb, "fallback": nf},
            "seconds": {"backend": round(tb, 6), "fallback": round(tf_, 6)},
            "ops": ops, "excluded": excl, "fallbacks": fallbacks,
            "whole_functions": {k: {a: b for a, b in v.items()} for k, v in (whole or {}).items()}}


# --- the workloads ---------------------------------------------------------------------------
class Workload:
    """One model on one side: build (fixed seed) and run the mode's call."""

    def __init__(self, tf, keras, name, mode, spec, seed=0, run_eagerly=False):
        from . import zoo
        self.tf, self.keras, self.mode, self.spec = tf, keras, mode, spec
        self.model = zoo.build(name, keras, seed=seed)
        n = spec.batch * (spec.steps if mode == "fit" else 1)
        x, y = zoo.sample_batch(self.model, n, seed=seed + 1)
        self.x, self.y = x, y
        if mode == "eager":
            self.xt = tf.constant(x)
        elif mode == "function":
            self.xt = tf.constant(x)
            model = self.model
            self.fn = tf.function(lambda t: model(t, training=False))
        else:
            last = self.model.layers[-1]
            act = getattr(getattr(last, "activation", None), "__name__", "")
            self.model.compile(
                optimizer=keras.optimizers.SGD(0.01),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=act != "softmax"),
                run_eagerly=run_eagerly)

    def call(self):
        """Run once; returns the values to compare: a dict name -> array."""
        if self.mode == "eager":
            return {"output": self.model(self.xt, training=False).numpy()}
        if self.mode == "function":
            return {"output": self.fn(self.xt).numpy()}
        b = self.spec.batch
        hist = self.model.fit(self.x, self.y, batch_size=b, epochs=1, shuffle=False, verbose=0)
        ev = self.model.evaluate(self.x, self.y, batch_size=b, verbose=0)
        out = {"fit_loss": np.asarray(hist.history["loss"], np.float32),
               "evaluate_loss": np.asarray(ev, np.float32)}
        for i, w in enumerate(self.model.weights):
            out[f"weight {i} ({w.name})"] = np.asarray(w)
        return out


def compare_values(ours, ref, reduction_len):
    """(ok, first problem or None, max abs error, worst error / tolerance) over named values."""
    from . import numerics
    problem, max_abs, worst = None, 0.0, 0.0
    for k, r in ref.items():
        o = ours.get(k)
        if o is None:
            problem = problem or f"{k}: missing"
            continue
        msg = numerics.compare(o, r, "reduction", reduction_len)
        if msg is not None and problem is None:
            problem = f"{k}: {msg}"
        o, r = np.asarray(o), np.asarray(r)
        if o.shape == r.shape and r.size and r.dtype.kind == "f":
            rtol, atol = numerics.tolerance(r.dtype, "reduction", reduction_len)
            of, rf = o.astype(np.float64), r.astype(np.float64)
            with np.errstate(all="ignore"):
                err = np.where((of == rf) | (np.isnan(of) & np.isnan(rf)), 0.0, np.abs(of - rf))
                ratio = err / (atol + rtol * np.abs(rf))
            max_abs = max(max_abs, float(np.nanmax(err)))
            worst = max(worst, float(np.nanmax(ratio)))
    return problem is None, problem, max_abs, worst


_CONTROL_FLOW = {"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"}
# graph plumbing that a program turns into inputs, constants or aliases: not executed ops
_PLUMBING = {"Placeholder", "Const", "Identity", "IdentityN", "_Arg", "_Retval"}


def _graph_op_counts(graph, seen=None):
    """Static op types of a FuncGraph and the bodies it calls (each body once)."""
    from . import tf_adapter as tfa
    seen = set() if seen is None else seen
    counts = {}
    for op in graph.get_operations():
        if op.type not in _CONTROL_FLOW | _PLUMBING and not excluded(op.type):
            counts[op.type] = counts.get(op.type, 0) + 1
        for a in ("body", "cond", "then_branch", "else_branch", "f", "branches"):
            try:
                v = op.get_attr(a)
            except (ValueError, TypeError):
                continue
            for fa in (v if isinstance(v, list) else [v]):
                fname = getattr(fa, "name", None)
                if isinstance(fname, bytes):
                    fname = fname.decode()
                if not fname or fname in seen:
                    continue
                seen.add(fname)
                try:
                    sub = tfa.function_graph(fname, graph)
                except Exception:  # noqa: BLE001 - a body we cannot find: not counted
                    sub = None
                if sub is not None:
                    for k, n in _graph_op_counts(sub, seen).items():
                        counts[k] = counts.get(k, 0) + n
    return counts


def measure(call):
    """Run `call` once on our side with a fresh ledger and trace spans on; returns coverage().

    tf.functions that run whole on TensorFlow (not lowerable) leave no per-op ledger entries: they
    are run here from the function hook, timed as one fallback span, and their ops counted
    statically from the FuncGraph (loop bodies once), with reason whole_function:<reason>.
    """
    import tf_backend
    from . import functions, trace
    whole = []
    orig = functions.on_call

    def on_call(atomic_fn, args):
        out = orig(atomic_fn, args)
        if out is not None:
            return out
        t0 = time.perf_counter()
        out = type(atomic_fn).call_flat.__wrapped__(atomic_fn, *args)   # TensorFlow's
        whole.append((atomic_fn, time.perf_counter() - t0))
        return out

    tf_backend.disable()
    was_on = trace.ON
    trace.ON = True
    functions.on_call = on_call
    n_events = len(trace._events)
    try:
        tf_backend.enable()
        call()   # re-warm after the switch
        tf_backend.reset_stats()
        whole.clear()
        n_events = len(trace._events)
        call()
        stats = tf_backend.stats()
        events = trace._events[n_events:]
    finally:
        tf_backend.disable()
        functions.on_call = orig
        del trace._events[n_events:]
        trace.ON = was_on
    cov = coverage(stats, events, _whole_functions(whole, stats))
    cov["functions"] = {k: {a: v.get(a) for a in ("compiled", "reason", "calls", "fallback_calls")}
                        for k, v in stats.get("functions", {}).items()}
    return cov


def _whole_functions(whole, stats):
    from . import tf_adapter as tfa
    out = {}
    for atomic_fn, seconds in whole:
        name, graph = tfa.atomic_fn_info(atomic_fn)
        f = out.get(name)
        if f is None:
            reason = stats.get("functions", {}).get(name, {}).get("reason") or "not_on_cpu"
            f = out[name] = {"reason": reason, "calls": 0, "seconds": 0.0,
                             "ops": _graph_op_counts(graph)}
        f["calls"] += 1
        f["seconds"] += seconds
    return out


def _stock_fit_values(name, spec, onednn=True, float64=False):
    """Stock's fit values (Workload.call) in a fresh process: oneDNN on or off, or the same run
    in float64 (float32 initial weights cast up; values rounded back to float32)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tfb_zoo_") as d:
        out = os.path.join(d, "values.npz")
        env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0", TF_BACKEND="0",
                   TF_CPP_MIN_LOG_LEVEL="2")
        r = subprocess.run([sys.executable, "-m", "tf_backend.zoo_report", "_stock_fit", name,
                            str(spec.batch), str(spec.steps), out] + (["float64"] if float64
                                                                       else []),
                           env=env, capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"stock fit subprocess (oneDNN {'on' if onednn else 'off'}"
                               f"{', float64' if float64 else ''}) failed: {r.stderr[-2000:]}")
        with np.load(out) as z:
            keys = json.loads(str(z["keys"]))
            return {k: z[f"v{i}"] for i, k in enumerate(keys)}


def _stock_fit_main(argv):
    """`python -m tf_backend.zoo_report _stock_fit NAME BATCH STEPS OUT.npz [float64]`."""
    name, batch, steps, out = argv[0], int(argv[1]), int(argv[2]), argv[3]
    import keras
    import tensorflow as tf
    spec = Spec(batch, steps=steps)
    if argv[4:5] == ["float64"]:
        w = Workload(tf, keras, name, "fit", spec)
        init = w.model.get_weights()
        keras.config.set_dtype_policy("float64")
        w = Workload(tf, keras, name, "fit", spec)
        w.model.set_weights([a.astype(np.float64) for a in init])
        vals = {k: np.asarray(v).astype(np.float32) for k, v in w.call().items()}
    else:
        vals = Workload(tf, keras, name, "fit", spec).call()
    keys = list(vals)
    np.savez(out, keys=np.asarray(json.dumps(keys)),
             **{f"v{i}": np.asarray(vals[k]) for i, k in enumerate(keys)})
    return 0


def stock_spread(tf, keras, name, spec, ref, ours, say):
    """Judge a fit that missed the tolerance against stock's own spread on the same run.

    Alternatives: stock eagerly (run_eagerly=True: same kernels, no Grappler fusion), stock
    with oneDNN off (Eigen kernels) and the same run in float64 (stock's own rounding error),
    the last two in subprocesses. Every value of ours that fails the tolerance must lie within
    numerics.within_spread of stock (SPREAD_K x the largest alternative distance).
    """
    import tf_backend
    from . import numerics
    say(f"{name}/fit: stock run_eagerly=True (spread)")
    tf_backend.disable()
    alts = {"run_eagerly": Workload(tf, keras, name, "fit", spec, run_eagerly=True).call()}
    say(f"{name}/fit: stock with oneDNN off, subprocess (spread)")
    alts["onednn_off"] = _stock_fit_values(name, spec, onednn=False)
    say(f"{name}/fit: stock in float64, subprocess (stock's own error)")
    alts["float64"] = _stock_fit_values(name, spec, float64=True)
    res = {"k": numerics.SPREAD_K, "alternatives": {}}
    for label, vals in alts.items():
        ok, problem, max_abs, err_tol = compare_values(vals, ref, spec.reduction_len)
        res["alternatives"][label] = {"match": ok, "mismatch": problem,
                                      "max_abs_error": max_abs, "error_over_tolerance": err_tol}
    worst, judged = None, 0
    for key, r in ref.items():
        o = ours.get(key)
        if o is None:
            worst = {"value": key, "distance": float("inf"), "bound": 0.0, "ratio": float("inf")}
            break
        if numerics.compare(o, r, "reduction", spec.reduction_len) is None:
            continue
        judged += 1
        ok, dist, bound = numerics.within_spread(
            o, r, [a[key] for a in alts.values() if key in a], "reduction", spec.reduction_len)
        ratio = dist / bound if bound else float("inf")
        if worst is None or ratio > worst["ratio"]:
            worst = {"value": key, "distance": dist, "bound": bound, "ratio": ratio,
                     "stock_distances": {
                         label: float(np.linalg.norm(np.asarray(a[key], np.float64)
                                                     - np.asarray(r, np.float64)))
                         for label, a in alts.items() if key in a}}
    res["judged_values"] = judged
    res["worst"] = worst
    res["ok"] = worst is None or worst["ratio"] <= 1.0
    return res


def _timed(call, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return ts


def run_cell(tf, keras, name, mode, spec=None, repeats=None, progress=None):
    """One model x mode: stock, then ours; match, coverage, time ratio."""
    import tf_backend
    spec = spec or spec_for(name)
    repeats = repeats if repeats is not None else spec.repeats
    say = progress or (lambda m: None)
    cell = {"model": name, "mode": mode, "batch": spec.batch,
            "steps": spec.steps if mode == "fit" else None, "status": "ok", "error": None}
    t_start = time.perf_counter()
    try:
        tf_backend.disable()
        say(f"{name}/{mode}: stock")
        stock = Workload(tf, keras, name, mode, spec)
        ref = stock.call()
        if mode != "fit":
            stock.call()   # warm-up (fit: the first call was it)
        t_stock = _timed(stock.call, repeats)

        say(f"{name}/{mode}: ours")
        if not tf_backend.enable():
            raise RuntimeError("tf_backend.enable() refused (unverified TensorFlow version?)")
        ours_w = Workload(tf, keras, name, mode, spec)
        ours = ours_w.call()
        ok, problem, max_abs, err_tol = compare_values(ours, ref, spec.reduction_len)
        # one warm call with the ledger reset and trace spans on: coverage by count and time
        cov = measure(ours_w.call)
        if mode == "fit" and not ok:
            cell["stock_spread"] = stock_spread(tf, keras, name, spec, ref, ours, say)
        tf_backend.enable()
        ours_w.call()   # re-warm untraced
        t_ours = _timed(ours_w.call, repeats)
    except Exception as e:  # noqa: BLE001 - one broken cell does not stop the table
        tf_backend.disable()
        cell.update(status="error", error=f"{type(e).__name__}: {e}")
        cell["seconds"] = round(time.perf_counter() - t_start, 1)
        return cell
    finally:
        tf_backend.disable()
    ms, mo = statistics.median(t_stock), statistics.median(t_ours)
    cell.update(match=ok, mismatch=problem, max_abs_error=max_abs, error_over_tolerance=err_tol,
                reduction_len=spec.reduction_len, compared=len(ref),
                coverage_count=cov["count"], coverage_time=cov["time"],
                stock_s=ms, ours_s=mo, ratio=mo / ms if ms else None,
                stock_times=t_stock, ours_times=t_ours,
                calls=cov["calls"], op_seconds=cov["seconds"], fallbacks=cov["fallbacks"],
                excluded=cov["excluded"], whole_functions=cov["whole_functions"],
                ops={op: {k: v for k, v in o.items()} for op, o in cov["ops"].items()},
                functions=cov["functions"],
                seconds=round(time.perf_counter() - t_start, 1))
    return cell


def run(models, modes, repeats=None, progress=None, json_path=None):
    """Every model x mode; with json_path, the document is rewritten after each cell."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf
    load0 = os.getloadavg()[0]
    doc = {"tool": "tfb zoo", "tensorflow": tf.__version__, "keras": keras.__version__,
           "cpus": os.cpu_count(), "load_average": [load0, load0],
           "coverage_excludes": EXCLUDED_DOC, "cells": []}
    for name in models:
        for mode in modes:
            c = run_cell(tf, keras, name, mode, repeats=repeats, progress=progress)
            c["load_average"] = os.getloadavg()[0]
            doc["cells"].append(c)
            doc["load_average"][1] = c["load_average"]
            if progress:
                progress(f"{name}/{mode}: {_short(c)}")
            if json_path:
                write_json(doc, json_path)
    return doc


def write_json(doc, path):
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


# --- output ------------------------------------------------------------------------------------
def _pct(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _short(c):
    if c["status"] != "ok":
        return f"error: {c['error']}"
    return (f"match={matched(c) or 'NO'} count={_pct(c['coverage_count'])} "
            f"time={_pct(c['coverage_time'])} ratio={c['ratio']:.2f} ({c['seconds']} s)")


def _fmt_s(s):
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


HEADER = ("model", "mode", "batch", "match", "err/tol", "cov count", "cov time",
          "stock", "ours", "ours/stock", "load", "top fallbacks (calls)")


def rows(doc):
    out = []
    for c in doc["cells"]:
        batch = f"{c['batch']}" + (f"x{c['steps']}" if c.get("steps") else "")
        if c["status"] != "ok":
            out.append((c["model"], c["mode"], batch, "ERROR", "", "", "", "", "", "", "",
                        c["error"][:80]))
            continue
        fb = ", ".join(f"{f['op']}×{f['calls']}" for f in c["fallbacks"][:3])
        sp = c.get("stock_spread") or {}
        m = matched(c) or "NO"
        if sp.get("worst"):
            m += f" ({sp['worst']['ratio']:.2g} of spread bound)"
        out.append((c["model"], c["mode"], batch, m,
                    f"{c['error_over_tolerance']:.2g}", _pct(c["coverage_count"]),
                    _pct(c["coverage_time"]), _fmt_s(c["stock_s"]), _fmt_s(c["ours_s"]),
                    f"{c['ratio']:.2f}", f"{c.get('load_average', 0):.1f}", fb or "-"))
    return out


def _title(doc):
    return (f"tfb zoo: TensorFlow {doc['tensorflow']}, Keras {doc['keras']}, {doc['cpus']} CPUs, "
            f"load average {doc['load_average'][0]:.2f} -> {doc['load_average'][1]:.2f}; "
            f"coverage = executed compute ops on our kernels (ledger count / trace time); "
            f"{doc['coverage_excludes']}; batch x fit steps; time = median per call (fit: fit "
            f"+ evaluate); load = 1-min load average after the cell")


def text(doc):
    rs = [HEADER] + rows(doc)
    w = [max(len(r[i]) for r in rs) for i in range(len(HEADER))]
    lines = [_title(doc)]
    lines += ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rs]
    lines += _problems(doc)
    return "\n".join(lines)


def markdown(doc):
    lines = [_title(doc), "", "| " + " | ".join(HEADER) + " |",
             "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(doc)]
    p = _problems(doc)
    if p:
        lines += [""] + [f"- {x.strip()}" for x in p[1:]]
    return "\n".join(lines)


def _problems(doc):
    out = []
    for c in doc["cells"]:
        if c["status"] != "ok":
            continue
        if not c["match"]:
            out.append(f"  {c['model']}/{c['mode']}: mismatch (err/tol "
                       f"{c['error_over_tolerance']:.3g}): {c['mismatch']}")
            sp = c.get("stock_spread")
            if sp:
                for label, a in sp["alternatives"].items():
                    out.append(f"  {c['model']}/{c['mode']}: stock {label} fit vs stock's "
                               f"compiled fit: err/tol {a['error_over_tolerance']:.3g}"
                               + (f": {a['mismatch']}" if a["mismatch"] else " (matches)"))
                w = sp.get("worst")
                if w:
                    out.append(f"  {c['model']}/{c['mode']}: spread rule (k={sp['k']:g}) over "
                               f"{sp['judged_values']} values: worst {w['value']}: "
                               f"||ours-stock|| {w['distance']:.3g} vs bound {w['bound']:.3g} "
                               f"-> {'within' if sp['ok'] else 'OUTSIDE'} stock's spread"
                               + "".join(f"; stock {k} {v:.3g}" for k, v in
                                         w.get("stock_distances", {}).items()))
        for f in c["fallbacks"]:
            reasons = ", ".join(f"{r}×{n}" for r, n in sorted(f["reasons"].items()))
            out.append(f"  {c['model']}/{c['mode']}: fallback {f['op']} ×{f['calls']} "
                       f"({_fmt_s(f['seconds'])}): {reasons or 'no ledger reason'}")
    return (["details:"] + out) if out else []


def matched(cell):
    """'yes' (within tolerance), 'spread' (a fit within stock's own spread), or None."""
    if cell["status"] != "ok":
        return None
    if cell["match"]:
        return "yes"
    sp = cell.get("stock_spread")
    return "spread" if sp and sp.get("ok") else None


def passes(cell, min_coverage=0.95):
    """The issue's bar: matches, and >= min_coverage by count and by time."""
    return (matched(cell) is not None
            and (cell["coverage_count"] or 0) >= min_coverage
            and (cell["coverage_time"] or 0) >= min_coverage)


def main(argv):
    import argparse
    from . import zoo
    p = argparse.ArgumentParser(prog="tfb zoo", description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(ISSUE_MODELS),
                   help=f"comma-separated, from {', '.join(zoo.BUILDERS)} (default: the "
                        f"issue's seven)")
    p.add_argument("--modes", default=",".join(MODES), help="eager, function, fit")
    p.add_argument("--repeats", type=int, help="timed calls per side (default per model)")
    p.add_argument("--json", metavar="PATH", help="write the table as JSON")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in models if m not in zoo.BUILDERS]
    if bad or not models:
        p.error(f"unknown model(s) {bad}; choose from {', '.join(zoo.BUILDERS)}")
    if not modes or set(modes) - set(MODES):
        p.error(f"--modes {args.modes!r}: use any of {', '.join(MODES)}")
    from .cli import progress_printer
    doc = run(models, modes, args.repeats, progress_printer(args.quiet), args.json)
    print(markdown(doc) if args.markdown else text(doc))
    return 0 if all(matched(c) for c in doc["cells"]) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["_stock_fit"]:
        sys.exit(_stock_fit_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
