"""`tfb conformance -- <pytest args>`: run a test suite with the backend off and on, compare.

Reports regressions (pass -> fail), fixes (fail -> pass) and hollow passes (passed with the
backend on while none of our kernels ran), as a table and JSON. A manifest (JSON
{"known": {"test id": "reason", ...}}) lists known differences: they are reported apart, never
as regressions. Exit status 1 when there are unexplained regressions.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET


def run_suite(pytest_args, mode, workdir, timeout=None):
    xml = os.path.join(workdir, f"junit-{mode}.xml")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    env.pop("TF_BACKEND", None)
    cmd = [sys.executable, "-m", "pytest", "-q",   # the plugin loads through its entry point
           f"--tf-backend={mode}", f"--junitxml={xml}", *pytest_args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return parse_junit(xml) if os.path.exists(xml) else {}, r


def parse_junit(path):
    """{test id: {"outcome": passed|failed|skipped, "props": {...}}}"""
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        tid = f"{tc.get('classname')}::{tc.get('name')}"
        if tc.find("failure") is not None or tc.find("error") is not None:
            outcome = "failed"
        elif tc.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        out[tid] = {"outcome": outcome, "props": props}
    return out


def compare(off, on, known=None):
    known = known or {}
    res = {"tests": len(set(off) | set(on)), "regressions": [], "fixes": [], "hollow": [],
           "known": [], "ran_kernels": 0,
           "passed_off": sum(t["outcome"] == "passed" for t in off.values()),
           "passed_on": sum(t["outcome"] == "passed" for t in on.values()),
           "backend_ops": {}, "fallback_ops": {}}
    for tid in sorted(set(off) | set(on)):
        a = off.get(tid, {}).get("outcome", "missing")
        b = on.get(tid, {}).get("outcome", "missing")
        props = on.get(tid, {}).get("props", {})
        if int(props.get("tf_backend_backend_calls", 0) or 0) > 0:
            res["ran_kernels"] += 1
        for op, n in json.loads(props.get("tf_backend_ops") or "{}").items():
            res["backend_ops"][op] = res["backend_ops"].get(op, 0) + n
        for op, reasons in json.loads(props.get("tf_backend_fallbacks") or "{}").items():
            agg = res["fallback_ops"].setdefault(op, {})
            for reason, n in reasons.items():
                agg[reason] = agg.get(reason, 0) + n
        if a == "passed" and b != "passed":
            (res["known"] if tid in known else res["regressions"]).append(
                {"test": tid, "off": a, "on": b, "reason": known.get(tid)})
        elif a != "passed" and b == "passed" and a != "skipped":
            res["fixes"].append({"test": tid, "off": a, "on": b})
        if b == "passed" and props.get("tf_backend_hollow") == "True":
            res["hollow"].append(tid)
    return res


def format_table(res):
    lines = [f"conformance: {res['tests']} tests; passed off {res.get('passed_off', '?')}, "
             f"on {res.get('passed_on', '?')}; {res['ran_kernels']} ran our kernels; "
             f"{len(res['regressions'])} regressions, {len(res['fixes'])} fixes, "
             f"{len(res['hollow'])} hollow passes, {len(res['known'])} known differences"]
    for title, key in (("regressions (pass -> fail)", "regressions"), ("fixes (fail -> pass)", "fixes"),
                       ("known differences", "known")):
        if res[key]:
            lines.append(f"  {title}:")
            lines.extend(f"    {r['test']}  ({r['off']} -> {r['on']})"
                         + (f"  reason: {r['reason']}" if r.get("reason") else "") for r in res[key])
    fb = sorted(((sum(r.values()), op, r) for op, r in res.get("fallback_ops", {}).items()),
                reverse=True)
    if fb:
        lines.append("  ops falling back (calls, by reason): " + "; ".join(
            f"{op} {n} ({', '.join(f'{k}x{v}' for k, v in sorted(r.items()))})"
            for n, op, r in fb[:25]) + (" ..." if len(fb) > 25 else ""))
    if res["hollow"]:
        lines.append("  hollow passes: " + ", ".join(res["hollow"][:20])
                     + (" ..." if len(res["hollow"]) > 20 else ""))
    return "\n".join(lines)


def main(argv):
    if "--" in argv:
        i = argv.index("--")
        own, pytest_args = argv[:i], argv[i + 1:]
    else:
        own, pytest_args = argv, []
    p = argparse.ArgumentParser(prog="tfb conformance", description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="on", choices=("on", "strict"))
    p.add_argument("--manifest", help="JSON {\"known\": {test id: reason}}")
    p.add_argument("--json", help="write the result here")
    p.add_argument("--timeout", type=float)
    p.add_argument("--keep", help="keep the JUnit XML files (junit-off.xml, junit-on.xml) here")
    args = p.parse_args(own)
    if not pytest_args:
        p.error("give the pytest arguments after '--'")
    known = {}
    if args.manifest:
        with open(args.manifest) as f:
            known = json.load(f).get("known", {})
    with tempfile.TemporaryDirectory() as d:
        d = args.keep or d
        os.makedirs(d, exist_ok=True)
        t0 = time.perf_counter()
        off, _ = run_suite(pytest_args, "off", d, args.timeout)
        t1 = time.perf_counter()
        on, _ = run_suite(pytest_args, args.mode, d, args.timeout)
        t2 = time.perf_counter()
    res = compare(off, on, known)
    res["wall_s"] = {"off": round(t1 - t0, 1), "on": round(t2 - t1, 1)}
    print(format_table(res))
    print(f"  wall: off {res['wall_s']['off']} s, on {res['wall_s']['on']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if res["regressions"] else 0
