"""pytest plugin: run any test suite with the backend on and see whether our kernels ran.

    pytest --tf-backend=on|strict|shadow|off   (default: TF_BACKEND, else off)

Per test it records the ledger delta as JUnit XML properties (`tf_backend_backend_calls`,
`tf_backend_fallback_calls`, `tf_backend_ops` {op: calls}, `tf_backend_fallbacks`
{op: {reason: calls}}) and counts hollow passes: tests that passed with
the backend on while none of our kernels ran. With the backend off it imports nothing.

    pytest --tf-backend-results=FILE

appends one JSON line per test as it starts ({"start": id}) and as it finishes ({"test": id,
"outcome": ..., "props": {...}}), flushed at once, from the controlling process (under xdist the
workers' reports arrive there): a run that is killed still leaves what finished and what was
running. Ids are JUnit's (`module.Class::name`), as in the known-differences manifest.
"""
import json
import os

import pytest

_state = {"mode": "off", "ran": 0, "hollow": 0, "tests": 0, "results": None, "seen": {},
          "backend_ops": {}, "fallback_ops": {}}   # the whole run, summed (add_test_ledger)


def pytest_addoption(parser):
    parser.addoption("--tf-backend", default=None, choices=("off", "on", "strict", "shadow"),
                     help="run tests with tf_backend in this mode (default: $TF_BACKEND or off)")
    parser.addoption("--tf-backend-results", default=None, metavar="FILE",
                     help="append per-test outcomes and ledgers to FILE as JSON lines, as they end")


def pytest_configure(config):
    from . import config as cfg
    opt = config.getoption("--tf-backend")
    mode = cfg.parse_mode(opt if opt is not None else os.environ.get("TF_BACKEND"))
    _state["mode"] = mode
    path = config.getoption("--tf-backend-results")
    if path and not hasattr(config, "workerinput"):   # xdist workers report to the controller
        _state["results"] = open(path, "a", buffering=1)
    if mode != "off":
        import tf_backend
        from . import ledger
        # the ledger is reset per test: TF_BACKEND_REPORT is written here, summed over the run
        # from every test's properties (under xdist the workers' reach the controller)
        ledger.report_owner = "pytest"
        # a suite tests our kernels from their first call: no first-use compile deferred to
        # a child while TensorFlow's kernel runs the call (kernels/cpu/deferred.py)
        os.environ.setdefault("TF_BACKEND_KERNEL_COMPILE", "sync")
        from . import functions   # and every compiled function runs on our executor
        functions.CHOICE = os.environ.setdefault("TF_BACKEND_FUNCTION_CHOICE", "off")
        from .devices import library
        compiles = library("compiles")
        if compiles is not None:
            compiles.mode(os.environ["TF_BACKEND_KERNEL_COMPILE"])
        tf_backend.enable(mode)
        if hasattr(config, "workerinput"):
            _one_blas_thread()


def _one_blas_thread():
    """Under pytest-xdist every core already runs a worker: OpenBLAS's own threads and numba's
    (our parallel kernels and GEMM team), which spin between calls, then only fight the other
    workers (a model-zoo MLP tf.function took 48 ms per call with two BLAS threads on a loaded
    2-core machine, 1.1 ms with one). numba's count is thread-local: this is the thread the
    tests run on."""
    try:
        from threadpoolctl import threadpool_limits
        _state["blas_limit"] = threadpool_limits(limits=1, user_api="blas")
    except Exception:  # no threadpoolctl or no BLAS found: nothing to limit
        pass
    try:
        import numba
        numba.set_num_threads(1)
    except Exception:  # noqa: BLE001 - numba's threading layer unavailable: nothing to limit
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if _state["mode"] == "off":
        yield
        return
    import tf_backend
    tf_backend.reset_stats()
    outcome = yield
    stats = tf_backend.stats()
    t = stats["totals"]
    ops = {op: o["backend"] for op, o in stats["ops"].items() if o["backend"]}
    fallbacks = {op: o["reasons"] for op, o in stats["ops"].items() if o["fallback"]}
    item.user_properties.append(("tf_backend_mode", _state["mode"]))
    item.user_properties.append(("tf_backend_backend_calls", t["backend"]))
    item.user_properties.append(("tf_backend_fallback_calls", t["fallback"]))
    item.user_properties.append(("tf_backend_ops", json.dumps(ops, sort_keys=True)))
    item.user_properties.append(("tf_backend_fallbacks", json.dumps(fallbacks, sort_keys=True)))
    if outcome.excinfo is None and not t["backend"]:
        item.user_properties.append(("tf_backend_hollow", True))


def junit_id(nodeid):
    """JUnit's name for a test: `pkg.module.Class::name` (what --junitxml writes)."""
    from _pytest.junitxml import mangle_test_address
    names = mangle_test_address(nodeid)
    return f"{'.'.join(names[:-1])}::{names[-1]}"


def _emit(rec):
    _state["results"].write(json.dumps(rec) + "\n")


def pytest_runtest_logstart(nodeid, location):
    if _state["results"] is not None:
        _emit({"start": junit_id(nodeid)})


def pytest_runtest_logreport(report):
    """Fold setup/call/teardown into one outcome as JUnit does: any failure or error fails the
    test, a skip (or an expected failure) skips it. Counted here, from the reports, so that the
    summary is right under xdist too (the controller sees every worker's reports)."""
    if _state["results"] is None and _state["mode"] == "off":
        return
    seen = _state["seen"].setdefault(report.nodeid, {"outcome": "passed", "props": {}})
    if report.failed:
        seen["outcome"] = "failed"
    elif report.skipped and seen["outcome"] == "passed":
        seen["outcome"] = "skipped"
    seen["props"].update({k: str(v) for k, v in report.user_properties})   # as JUnit writes them
    if report.when == "teardown":
        del _state["seen"][report.nodeid]
        if _state["results"] is not None:
            _emit({"test": junit_id(report.nodeid), **seen})
        if "tf_backend_backend_calls" in seen["props"]:
            add_test_ledger(seen["props"], _state["backend_ops"], _state["fallback_ops"])
            _state["tests"] += 1
            if seen["outcome"] == "passed":
                _state["hollow" if seen["props"].get("tf_backend_hollow") else "ran"] += 1


def add_test_ledger(props, backend_ops, fallback_ops):
    """Add one test's ledger properties (as this plugin writes them) to the running sums
    backend_ops {op: calls} and fallback_ops {op: {reason: calls}}."""
    for op, n in json.loads(props.get("tf_backend_ops") or "{}").items():
        backend_ops[op] = backend_ops.get(op, 0) + int(n)
    for op, reasons in json.loads(props.get("tf_backend_fallbacks") or "{}").items():
        agg = fallback_ops.setdefault(op, {})
        for reason, n in reasons.items():
            agg[reason] = agg.get(reason, 0) + int(n)


def run_report():
    """The whole run's ledger, in tf_backend.stats()'s form (ops and totals)."""
    ops = {}
    for op in sorted(set(_state["backend_ops"]) | set(_state["fallback_ops"])):
        reasons = _state["fallback_ops"].get(op, {})
        ops[op] = {"backend": _state["backend_ops"].get(op, 0),
                   "fallback": sum(reasons.values()), "errors": 0, "reasons": dict(reasons),
                   "kernels": {}}
    b = sum(o["backend"] for o in ops.values())
    f = sum(o["fallback"] for o in ops.values())
    return {"ops": ops, "functions": {}, "tests": _state["tests"],
            "totals": {"backend": b, "fallback": f, "coverage": b / max(1, b + f)}}


def pytest_unconfigure(config):
    if _state["results"] is not None:
        _state["results"].close()
        _state["results"] = None
    path = os.environ.get("TF_BACKEND_REPORT")
    if _state["mode"] != "off" and path and not hasattr(config, "workerinput"):
        from . import ledger
        ledger.write_report(path, run_report())


def pytest_terminal_summary(terminalreporter):
    if _state["mode"] == "off":
        return
    terminalreporter.write_line(
        f"tf_backend ({_state['mode']}): {_state['ran']} passing tests ran our kernels, "
        f"{_state['hollow']} hollow passes (no backend kernel ran), {_state['tests']} tests")
