"""The JSON documents written by `tfb ab --json` and `tfb bench --json` (schema_version 1).

tfb ab:
  schema_version  1
  tool            "tfb ab"
  created         UTC time, ISO 8601
  environment     {tf_version, tf_backend_version, python, platform, cpus, loadavg_start,
                   loadavg_end}
  target          {kind: model|keras_file|saved_model|callable|script, name,
                   inputs: [{shape, dtype}], notes: [str]}  (script: command: [argv])
  settings        {repeats, warmup, rewarm, arms, reduction_len, op_time_calls, ...}
  runs            [{arm, label, side: stock|ours, mode: eager|function|xla|script,
                    status: ok|error, error, samples_s: [s per call], summary}]
                  summary = {n, median_s, q1_s, q3_s, min_s, max_s, mean_s} or null;
                  script runs add max_rss_mib: [..], returncodes: [..], metrics: {name: value}
  ratios          [{numerator, denominator, ratio, ci_low, ci_high, confidence, n_boot}]
                  (ratio of medians, numerator/denominator: < 1 means the numerator is faster)
  numerics        [{kind: "output", arm, reference, role: backend|reference, output, shape,
                    dtype, max_abs, max_rel, max_ulp, reduction_len, verdict: ok|mismatch,
                    detail}]  or, for scripts, [{kind: "metric", name, stock, ours, abs_diff,
                    rel_diff}]
  coverage        {arm: ledger snapshot {ops: {op: {backend, fallback, errors, reasons,
                   kernels}}, totals: {backend, fallback, coverage}} for one call, or null}
  top_ops         {arm: {calls, wall_s, op_s, ops: [{op, calls, total_s}]}} (per call; eager
                   arms only; empty for scripts)

tfb bench: {schema_version, tool: "tfb bench", created, environment, settings,
            workloads: [{name, description, status, error, runs, ratios, numerics, coverage}]}
with runs/ratios/numerics/coverage as above (samples are seconds per workload call).
"""
import datetime
import os
import platform
import sys

SCHEMA_VERSION = 1

_AB_KEYS = {"schema_version": int, "tool": str, "created": str, "environment": dict,
            "target": dict, "settings": dict, "runs": list, "ratios": list, "numerics": list,
            "coverage": dict, "top_ops": dict}
_RUN_KEYS = {"arm": str, "label": str, "side": str, "mode": str, "status": str,
             "samples_s": list}
_RATIO_KEYS = ("numerator", "denominator", "ratio", "ci_low", "ci_high")
_SUMMARY_KEYS = ("n", "median_s", "q1_s", "q3_s", "min_s", "max_s", "mean_s")


def tf_version():
    """TensorFlow's version without importing it when it is not loaded (script mode)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        return tf.__version__
    from importlib import metadata
    for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return None


def environment(load_start=None):
    import tf_backend
    return {"tf_version": tf_version(), "tf_backend_version": tf_backend.__version__,
            "python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": loadavg()}


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _check(cond, msg):
    if not cond:
        raise ValueError(f"schema: {msg}")


def _check_keys(obj, keys, where):
    _check(isinstance(obj, dict), f"{where} is not an object")
    for k, t in (keys.items() if isinstance(keys, dict) else ((k, object) for k in keys)):
        _check(k in obj, f"{where} lacks {k!r}")
        _check(isinstance(obj[k], t), f"{where}.{k} is not {t.__name__}")


def _validate_parts(doc, where):
    for i, run in enumerate(doc["runs"]):
        w = f"{where}runs[{i}]"
        _check_keys(run, _RUN_KEYS, w)
        _check(run["side"] in ("stock", "ours"), f"{w}.side")
        _check(run["status"] in ("ok", "error"), f"{w}.status")
        if run["status"] == "ok":
            _check_keys(run["summary"], _SUMMARY_KEYS, f"{w}.summary")
    for i, r in enumerate(doc["ratios"]):
        _check_keys(r, _RATIO_KEYS, f"{where}ratios[{i}]")
        _check(0 < r["ci_low"] <= r["ci_high"] and r["ratio"] > 0, f"{where}ratios[{i}] CI")
    for i, n in enumerate(doc["numerics"]):
        _check(n.get("kind") in ("output", "metric"), f"{where}numerics[{i}].kind")
        keys = (("arm", "reference", "verdict") if n["kind"] == "output"
                else ("name", "stock", "ours"))
        _check_keys(n, keys, f"{where}numerics[{i}]")
    for arm, led in doc["coverage"].items():
        if led is not None:
            _check_keys(led, {"ops": dict, "totals": dict}, f"{where}coverage[{arm!r}]")


def validate(doc):
    """Raise ValueError naming the first problem in a `tfb ab` document; return it otherwise."""
    _check_keys(doc, _AB_KEYS, "document")
    _check(doc["schema_version"] == SCHEMA_VERSION, "schema_version")
    _check(doc["tool"] == "tfb ab", "tool")
    _check_keys(doc["target"], {"kind": str, "name": str}, "target")
    _validate_parts(doc, "")
    for arm, prof in doc["top_ops"].items():
        _check_keys(prof, {"wall_s": float, "op_s": float, "ops": list}, f"top_ops[{arm!r}]")
    return doc


def validate_bench(doc):
    _check_keys(doc, {"schema_version": int, "tool": str, "environment": dict,
                      "settings": dict, "workloads": list}, "document")
    _check(doc["schema_version"] == SCHEMA_VERSION and doc["tool"] == "tfb bench", "header")
    for i, w in enumerate(doc["workloads"]):
        _check_keys(w, {"name": str, "runs": list, "ratios": list, "numerics": list,
                        "coverage": dict}, f"workloads[{i}]")
        _validate_parts(w, f"workloads[{i}].")
    return doc
