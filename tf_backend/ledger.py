"""The ledger: every dispatch decision, counted per op type, device kernel and fallback reason."""
import itertools
import json
import sys
import threading

_lock = threading.Lock()
_ops = {}
# Hot-path counters: next() on itertools.count is atomic under the GIL, so the eager path
# counts without taking a lock; snapshot() folds them in.
_fast = {}   # (op, kernel name) -> itertools.count


def _count_value(c):
    return int(repr(c)[6:-1])   # "count(5)": the next value, i.e. how many next() calls


class _OpStats:
    __slots__ = ("backend", "fallback", "errors", "reasons", "kernels")

    def __init__(self):
        self.backend = self.fallback = self.errors = 0
        self.reasons = {}
        self.kernels = {}


def _get(op):
    s = _ops.get(op)
    if s is None:
        with _lock:
            s = _ops.setdefault(op, _OpStats())
    return s


def backend(op, kernel_name):
    c = _fast.get((op, kernel_name))
    if c is None:
        with _lock:
            c = _fast.setdefault((op, kernel_name), itertools.count())
    next(c)


def counter(op, kernel_name):
    """The lock-free counter for (op, kernel): call next() on it once per execution."""
    with _lock:
        return _fast.setdefault((op, kernel_name), itertools.count())


def fallback(op, reason):
    s = _get(op)
    with _lock:
        s.fallback += 1
        s.reasons[reason] = s.reasons.get(reason, 0) + 1


def uncount_fallback(op, reason):
    s = _get(op)
    with _lock:
        s.fallback -= 1
        n = s.reasons.get(reason, 0) - 1
        if n > 0:
            s.reasons[reason] = n
        else:
            s.reasons.pop(reason, None)


def program_ops(op_counts, runs=1):
    """`runs` runs of one program: its nodes' ops, on our kernels or TensorFlow's (a While adds
    its cond's and body's runs once per loop, so loops count every iteration)."""
    if not runs or not op_counts:
        return
    with _lock:
        for op, (n_backend, reasons) in op_counts.items():
            s = _ops.get(op)
            if s is None:
                s = _ops[op] = _OpStats()
            if n_backend:
                s.backend += n_backend * runs
                s.kernels["program"] = s.kernels.get("program", 0) + n_backend * runs
            for r, n in reasons.items():
                s.fallback += n * runs
                left = s.reasons.get(r, 0) + n * runs
                if left > 0:
                    s.reasons[r] = left
                else:
                    s.reasons.pop(r, None)


def error(op):
    """A call that ran our shape fn/kernel and raised the user's error (bad input)."""
    s = _get(op)
    with _lock:
        s.errors += 1


def reset():
    """Zero every counter. What we know of compiled functions stays, with its calls zeroed."""
    from . import shadow
    shadow.reset()
    with _lock:
        _ops.clear()
        _fast_base.clear()   # counters may be held by callers: remember where they stood
        _fast_base.update({k: _count_value(c) for k, c in _fast.items()})
        for f in _functions.values():
            f["calls"] = f["fallback_calls"] = 0
            f["_touched"] = False
        _loops.clear()   # loops compiled or declined since the last reset


_fast_base = {}   # counter values at the last reset


def snapshot():
    with _lock:
        ops = {op: {"backend": s.backend, "fallback": s.fallback, "errors": s.errors,
                    "reasons": dict(s.reasons), "kernels": dict(s.kernels)}
               for op, s in sorted(_ops.items())}
        for (op, kname), c in _fast.items():
            n = _count_value(c) - _fast_base.get((op, kname), 0)
            if n <= 0:
                continue
            o = ops.setdefault(op, {"backend": 0, "fallback": 0, "errors": 0, "reasons": {},
                                    "kernels": {}})
            o["backend"] += n
            o["kernels"][kname] = o["kernels"].get(kname, 0) + n
        ops = dict(sorted(ops.items()))
    backend_calls = sum(o["backend"] for o in ops.values())
    fallback_calls = sum(o["fallback"] for o in ops.values())
    with _lock:
        functions = {k: {a: b for a, b in v.items() if a != "_touched"}
                     for k, v in sorted(_functions.items()) if v.get("_touched", True)}
    from . import shadow
    extra = {"shadow": shadow.report()} if shadow.report()["checked"] else {}
    with _lock:
        if _autotune:
            extra["autotune"] = {op: dict(a) for op, a in sorted(_autotune.items())}
        if _schedule:
            extra["schedule"] = {k: dict(v) for k, v in sorted(_schedule.items())}
        if _loops:
            extra["loops"] = {k: dict(v) for k, v in sorted(_loops.items())}
    from . import devices
    cache = devices.library("weight_cache")   # weight forms kept between calls, and not kept
    wc = cache.stats() if cache is not None else {"events": 0}
    if wc["events"]:
        extra["weight_cache"] = wc
    blas = devices.library("blas")   # which product kernel each shape's measurement chose
    gc = blas.choice_stats() if blas is not None else {"measured": 0, "loaded": 0}
    if gc["measured"] or gc["loaded"]:
        extra["gemm_choice"] = gc
    return {"ops": ops, "functions": functions, **extra,
            "totals": {"backend": backend_calls, "fallback": fallback_calls,
                       "coverage": backend_calls / max(1, backend_calls + fallback_calls)}}


def format_table(stats):
    rows = [("op", "backend", "fallback", "errors", "fallback reasons")]
    for op, o in stats["ops"].items():
        reasons = ", ".join(f"{r}×{n}" for r, n in sorted(o["reasons"].items()))
        rows.append((op, str(o["backend"]), str(o["fallback"]), str(o["errors"]), reasons))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r[:4]))
             + "  " + r[4] for r in rows]
    t = stats["totals"]
    lines.append(f"total: {t['backend']} on backend kernels, {t['fallback']} fell back "
                 f"({100 * t['coverage']:.1f}% on backend)")
    if "shadow" in stats:
        from . import shadow
        lines.append(shadow.format_report(stats["shadow"]))
    return "\n".join(lines)


_autotune = {}   # op -> {"stock": n, "ours": n, "last": description}
_schedule = {}   # program -> {"concurrent": bool, "serial_over_concurrent": ratio}
_loops = {}      # While node -> {"compiled": bool, "reason", "first_run_seconds", "source_chars"}


def loop_interpreted(name, reason):
    if name not in _loops:
        loop_compiled(name, None, reason, 0.0)


def loop_compiled(name, source_chars, reason, seconds):
    """A While's compiled form (executor._compiled_loop): its first run, which compiles it (or
    loads numba's cached machine code), or why it runs interpreted."""
    with _lock:
        _loops[name] = {"compiled": reason is None, "reason": reason,
                        "first_run_seconds": round(seconds, 4), "source_chars": source_chars}


def scheduled(program, concurrent, ratio):
    """executor._schedule_trial chose how a program with independent heavy nodes runs."""
    with _lock:
        _schedule[program] = {"concurrent": concurrent,
                              "serial_over_concurrent": round(ratio, 3)}


def autotuned(op, got):
    """A kernel choice (tf_backend/autotune.py) for one node of `op`."""
    from . import autotune
    with _lock:
        a = _autotune.setdefault(op, {"stock": 0, "ours": 0, "last": ""})
        a[got["choice"]] += 1
        a["last"] = (f"{autotune.describe(got)} (ours {got['ours_ms']:.3g} ms, TensorFlow's "
                     f"{got['stock_ms']:.3g} ms)")


report_owner = None   # who writes TF_BACKEND_REPORT instead of the at-exit hook ("pytest")


def write_report(path, stats):
    if path == "-":
        sys.stderr.write("tf_backend ledger\n" + format_table(stats) + "\n")
    else:
        with open(path, "w") as f:
            json.dump(stats, f, indent=1, sort_keys=True)


# --- functions (programs) ---------------------------------------------------------------
_functions = {}


def function_compiled(name, summary, reason, seconds):
    with _lock:
        f = _functions.setdefault(name, {"calls": 0, "fallback_calls": 0})
        f.update({"compiled": reason is None, "reason": reason,
                  "compile_seconds": round(seconds, 6), "_touched": True})
        if summary:
            f.update(summary)


def function_choice(name, choice, ours_s, tensorflow_s, trials=1, recorded=False, agreed=None):
    """functions._choose measured who runs a compiled function (the latest of `trials`);
    `recorded`: the choice came from an earlier process (tf_backend/choices.py); `agreed`: a
    collective function's workers chose together (their count, the times their means), or
    "pending", or why they could not."""
    with _lock:
        f = _functions.setdefault(name, {"calls": 0, "fallback_calls": 0})
        f["choice"] = {"runs": choice, "ours_ms": round(ours_s * 1e3, 4),
                       "tensorflow_ms": round(tensorflow_s * 1e3, 4), "trials": trials}
        if recorded:
            f["choice"]["recorded"] = True
        if agreed is not None:
            f["choice"]["agreed"] = agreed
        f["_touched"] = True


def function_called(name, fallback):
    with _lock:
        f = _functions.setdefault(name, {"calls": 0, "fallback_calls": 0})
        f["fallback_calls" if fallback else "calls"] += 1
        f["_touched"] = True
