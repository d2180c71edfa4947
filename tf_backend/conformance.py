"""`tfb conformance -- <pytest args>`: run a test suite with the backend off and on, compare.

Reports regressions (pass -> fail), fixes (fail -> pass) and hollow passes (passed with the
backend on while none of our kernels ran), as a table and JSON. A manifest (JSON
{"known": {"test id": "reason", ...}}) lists known differences: they are reported apart, never
as regressions. Exit status 1 when there are unexplained regressions, 2 when a side did not run
to the end (timed out, killed as a fork chain, or pytest itself failed): its finished tests are
still compared, the unfinished ones are reported as not run, and the tests that were running
when it stopped are named.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from .pytest_plugin import add_test_ledger


def run_suite(pytest_args, mode, workdir, timeout=None, max_procs=64):
    """One side (`off` or the backend mode) in its own session, so that it can be killed whole:
    on timeout, or when the session holds more than `max_procs` processes (a chain of forks),
    every process in it is killed, after a stack dump of the first few (py-spy, when on PATH)
    into the log. Per-test results come from the plugin's JSON-lines stream, so a killed side
    still reports the tests that finished and names the ones that were running.
    Returns (results {test id: {"outcome", "props"}}, info {"status", "rc", "running", "log"})."""
    xml = os.path.join(workdir, f"junit-{mode}.xml")
    stream = os.path.join(workdir, f"results-{mode}.jsonl")
    log = os.path.join(workdir, f"log-{mode}.txt")
    if os.path.exists(stream):
        os.remove(stream)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    env.pop("TF_BACKEND", None)
    cmd = [sys.executable, "-m", "pytest", "-q",   # the plugin loads through its entry point
           f"--tf-backend={mode}", f"--junitxml={xml}", f"--tf-backend-results={stream}",
           *pytest_args]
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        status = _watch(p, timeout, max_procs, log)
    results, running = parse_stream(stream)
    if status == "ok" and p.returncode not in (0, 1):   # 2 interrupted, 3 internal, 4 usage, 5 none
        status = f"pytest exit code {p.returncode}"
    return results, {"status": status, "rc": p.returncode, "running": running, "log": log}


def _session_members(sid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:   # field 6 of stat: session id
                out.append(int(d))
    return out


def _watch(p, timeout, max_procs, log):
    """Wait for `p` (a session leader); kill its session on timeout or a fork storm."""
    have_proc = os.path.isdir("/proc")
    t0, status = time.monotonic(), "ok"
    while p.poll() is None:
        members = _session_members(p.pid) if have_proc else []
        if max_procs and len(members) > max_procs:
            status = f"killed: {len(members)} processes (a fork chain?)"
        elif timeout and time.monotonic() - t0 > timeout:
            status = f"timed out after {timeout:.0f} s"
        if status != "ok":
            _dump(p.pid, members, log, status)
            break
        time.sleep(1.0)
    _kill_session(p)   # also reaps what a finished run left behind (orphaned workers)
    return status


def _dump(sid, members, log, why):
    with open(log, "a") as f:
        f.write(f"\n=== tfb conformance: {why}; processes of session {sid}:\n")
        f.flush()
        subprocess.run(["ps", "-s", str(sid), "-o", "pid,ppid,etimes,rss,args", "--forest"],
                       stdout=f, stderr=subprocess.STDOUT, check=False)
        if shutil.which("py-spy"):
            for pid in sorted(members)[:4]:
                f.write(f"--- py-spy dump --pid {pid}\n")
                f.flush()
                try:
                    subprocess.run(["py-spy", "dump", "--pid", str(pid)], stdout=f,
                                   stderr=subprocess.STDOUT, timeout=60, check=False)
                except subprocess.TimeoutExpired:
                    f.write("(py-spy timed out)\n")


def _kill_session(p):
    """SIGTERM the session's process group, then SIGKILL whatever of the session is left."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for pid in _session_members(p.pid) if os.path.isdir("/proc") else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def parse_stream(path):
    """The plugin's JSON lines -> ({test id: {"outcome", "props"}}, [tests started, unfinished])."""
    out, started = {}, []
    if not os.path.exists(path):
        return out, started
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:   # a line cut short by a kill
                continue
            if "start" in rec:
                started.append(rec["start"])
            else:
                out[rec["test"]] = {"outcome": rec["outcome"], "props": rec.get("props", {})}
    return out, [t for t in dict.fromkeys(started) if t not in out]


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


def compare(off, on, known=None, incomplete=()):
    """`incomplete`: the sides ("off", "on") that did not run to the end; their missing tests
    are listed as not run, not as regressions."""
    known = known or {}
    res = {"tests": len(set(off) | set(on)), "regressions": [], "fixes": [], "hollow": [],
           "known": [], "not_run": [], "ran_kernels": 0,
           "passed_off": sum(t["outcome"] == "passed" for t in off.values()),
           "passed_on": sum(t["outcome"] == "passed" for t in on.values()),
           "backend_ops": {}, "fallback_ops": {}}
    for tid in sorted(set(off) | set(on)):
        a = off.get(tid, {}).get("outcome", "missing")
        b = on.get(tid, {}).get("outcome", "missing")
        props = on.get(tid, {}).get("props", {})
        if int(props.get("tf_backend_backend_calls", 0) or 0) > 0:
            res["ran_kernels"] += 1
        add_test_ledger(props, res["backend_ops"], res["fallback_ops"])
        if (a == "missing" and "off" in incomplete) or (b == "missing" and "on" in incomplete):
            res["not_run"].append(tid)
        elif a == "passed" and b != "passed":
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
             f"{len(res['hollow'])} hollow passes, {len(res['known'])} known differences"
             + (f", {len(res['not_run'])} not run on one side" if res.get("not_run") else "")]
    for side, info in res.get("sides", {}).items():
        if info["status"] != "ok":
            lines.append(f"  SIDE {side} DID NOT FINISH: {info['status']}; "
                         f"{info['finished']} tests finished; log {info['log']}")
            if info["running"]:
                lines.append(f"    running when it stopped: {', '.join(info['running'][:8])}")
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
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds per side before its whole process session is killed "
                        "(default 3600; 0: none)")
    p.add_argument("--max-procs", type=int, default=64,
                   help="kill a side whose session holds more processes than this (default 64)")
    p.add_argument("--keep", help="keep the JUnit XML, per-test JSON lines and pytest logs here "
                                  "({junit,results,log}-{off,on}.*)")
    args = p.parse_args(own)
    if not pytest_args:
        p.error("give the pytest arguments after '--'")
    known = {}
    if args.manifest:
        with open(args.manifest) as f:
            known = json.load(f).get("known", {})
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or tmp
        os.makedirs(d, exist_ok=True)
        sides, results, wall = {}, {}, {}
        for side in ("off", args.mode):
            t0 = time.perf_counter()
            results[side], info = run_suite(pytest_args, side, d, args.timeout or None,
                                            args.max_procs)
            wall[side] = round(time.perf_counter() - t0, 1)
            info["finished"] = len(results[side])
            sides["off" if side == "off" else "on"] = info
            if info["status"] != "ok" and not args.keep:   # the log goes with the temp dir
                with open(info["log"], errors="replace") as f:
                    info["log_tail"] = f.read()[-6000:]
        off, on = results["off"], results[args.mode]
    res = compare(off, on, known, [s for s, i in sides.items() if i["status"] != "ok"])
    res["sides"] = sides
    res["wall_s"] = {"off": wall["off"], "on": wall[args.mode]}
    print(format_table(res))
    for side, info in sides.items():
        if info.get("log_tail"):
            print(f"  --- end of the {side} log ---\n{info['log_tail']}")
    print(f"  wall: off {res['wall_s']['off']} s, on {res['wall_s']['on']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if res["regressions"]:
        return 1
    return 2 if any(i["status"] != "ok" for i in sides.values()) else 0
