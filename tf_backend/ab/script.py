"""Script mode: `tfb ab -- python train.py ...` runs the command with TF_BACKEND=0 and with
TF_BACKEND=1 (alternating, `repeats` times each) in subprocesses.

Per run: wall time, peak memory (max RSS of the child and its waited-for descendants, from
os.wait4), exit code, the last output line that carries metric values ("loss: 0.123",
"loss=0.123", Keras' "loss: 0.1 - accuracy: 0.9"); ours runs also write their ledger through
TF_BACKEND_REPORT=<temp file>.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from . import schema, timing

_NUM = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf"
_PAIR = re.compile(r"([A-Za-z_][\w./-]*)(?:\s*[:=]\s*|\s+)(" + _NUM + r")\b", re.IGNORECASE)
METRIC_NAMES = r"loss|acc|accuracy|error|mse|mae|rmse|auc|f1|precision|recall|perplexity|" \
               r"score|metric|top\d+"


def find_metrics(text, names=METRIC_NAMES):
    """{name: value} from the last line holding a `name: value` / `name=value` / `name value`
    pair whose name contains one of `names` (a regex); {} when there is none."""
    want = re.compile(names, re.IGNORECASE)
    for line in reversed(re.split(r"[\r\n]+", text.replace("\x08", ""))):
        pairs = [(k, v) for k, v in _PAIR.findall(line) if want.search(k)]
        if pairs:
            return {k: float(v) for k, v in pairs}
    return {}


def _run_once(cmd, env, timeout):
    """(wall s, max RSS MiB, exit code, output text) of one child run."""
    with tempfile.TemporaryFile("w+b") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if timeout and time.perf_counter() - t0 > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    scale = 1024 if sys.platform != "darwin" else 1   # ru_maxrss: KiB on Linux, bytes on macOS
    return wall, ru.ru_maxrss * scale / 2**20, proc.returncode, text


def _env(side, report):
    env = dict(os.environ)
    env.pop("TF_BACKEND_REPORT", None)
    env["TF_BACKEND"] = "1" if side == "ours" else "0"
    if side == "ours":
        env["TF_BACKEND_REPORT"] = report
    return env


def _merge_ledgers(a, b):
    if a is None:
        return b
    for op, o in b["ops"].items():
        m = a["ops"].setdefault(op, {"backend": 0, "fallback": 0, "errors": 0, "reasons": {},
                                     "kernels": {}})
        for k in ("backend", "fallback", "errors"):
            m[k] += o[k]
        for k in ("reasons", "kernels"):
            for r, n in o[k].items():
                m[k][r] = m[k].get(r, 0) + n
    for name, f in (b.get("functions") or {}).items():
        m = a.setdefault("functions", {}).get(name)
        if m is None:
            a["functions"][name] = f
        else:
            m["calls"] = m.get("calls", 0) + f.get("calls", 0)
            m["fallback_calls"] = m.get("fallback_calls", 0) + f.get("fallback_calls", 0)
    back = sum(o["backend"] for o in a["ops"].values())
    fall = sum(o["fallback"] for o in a["ops"].values())
    a["totals"] = {"backend": back, "fallback": fall, "coverage": back / max(1, back + fall)}
    return a


def run(cmd, repeats=1, timeout=None, metric_names=METRIC_NAMES, progress=None, echo=None):
    """The `tfb ab` document for a command run on both sides."""
    load = schema.loadavg()
    runs = {s: {"arm": f"{s}_script", "label": s, "side": s, "mode": "script", "samples_s": [],
                "max_rss_mib": [], "returncodes": [], "metrics": {}, "error": None}
            for s in ("stock", "ours")}
    ledger, tails = None, {}
    with tempfile.TemporaryDirectory(prefix="tfb-ab-") as tmp:
        for i in range(repeats):
            for side in (("stock", "ours") if i % 2 == 0 else ("ours", "stock")):
                report = os.path.join(tmp, f"ledger-{i}.json")
                if progress:
                    progress(f"run {i + 1}/{repeats} {side}: TF_BACKEND="
                             f"{'1' if side == 'ours' else '0'} {' '.join(cmd)}")
                wall, rss, rc, text = _run_once(cmd, _env(side, report), timeout)
                r = runs[side]
                r["samples_s"].append(wall)
                r["max_rss_mib"].append(rss)
                r["returncodes"].append(rc)
                r["metrics"] = find_metrics(text, metric_names) or r["metrics"]
                tails[side] = text
                if rc != 0 and r["error"] is None:
                    last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or [""]
                    r["error"] = f"exit code {rc}: {last[0][:200]}"
                if echo:
                    echo(side, text)
                if progress:
                    progress(f"  {side}: {wall:.2f} s, max RSS {rss:.0f} MiB, exit {rc}")
                if side == "ours" and os.path.exists(report):
                    with open(report) as f:
                        ledger = _merge_ledgers(ledger, json.load(f))
    out_runs = []
    for r in runs.values():
        ok = r["error"] is None
        r["status"] = "ok" if ok else "error"
        r["summary"] = timing.summarize(r["samples_s"])
        out_runs.append(r)
    ok = all(r["status"] == "ok" for r in out_runs)
    ratios = timing.ratios({r["arm"]: r["samples_s"] for r in out_runs},
                           (("ours_script", "stock_script"),)) if ok else []
    return {"schema_version": schema.SCHEMA_VERSION, "tool": "tfb ab", "created": schema.now(),
            "environment": schema.environment(load),
            "target": {"kind": "script", "name": script_name(cmd),
                       "command": list(cmd), "inputs": [], "notes": []},
            "settings": {"repeats": repeats, "warmup": 0, "timeout_s": timeout,
                         "metric_names": metric_names},
            "runs": out_runs, "ratios": ratios,
            "numerics": metric_rows(runs["stock"]["metrics"], runs["ours"]["metrics"]),
            "coverage": {"ours_script": ledger}, "top_ops": {}}


def script_name(cmd):
    """The first *.py argument of the command, else the command itself."""
    return next((os.path.basename(a) for a in cmd if a.endswith(".py")), " ".join(cmd))


def metric_rows(stock, ours):
    rows = []
    for name in stock:
        if name in ours:
            a, b = stock[name], ours[name]
            d = abs(b - a)
            rows.append({"kind": "metric", "name": name, "stock": a, "ours": b, "abs_diff": d,
                         "rel_diff": d / abs(a) if a else (0.0 if d == 0 else float("inf"))})
    return rows
