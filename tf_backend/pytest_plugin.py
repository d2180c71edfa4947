"""pytest plugin: run any test suite with the backend on and see whether our kernels ran.

    pytest --tf-backend=on|strict|shadow|off   (default: TF_BACKEND, else off)

Per test it records the ledger delta as JUnit XML properties (`tf_backend_backend_calls`,
`tf_backend_fallback_calls`, `tf_backend_ops` {op: calls}, `tf_backend_fallbacks`
{op: {reason: calls}}) and counts hollow passes: tests that passed with
the backend on while none of our kernels ran. With the backend off it imports nothing.
"""
import json
import os

import pytest

_state = {"mode": "off", "ran": 0, "hollow": 0, "tests": 0}


def pytest_addoption(parser):
    parser.addoption("--tf-backend", default=None, choices=("off", "on", "strict", "shadow"),
                     help="run tests with tf_backend in this mode (default: $TF_BACKEND or off)")


def pytest_configure(config):
    from . import config as cfg
    opt = config.getoption("--tf-backend")
    mode = cfg.parse_mode(opt if opt is not None else os.environ.get("TF_BACKEND"))
    _state["mode"] = mode
    if mode != "off":
        import tf_backend
        tf_backend.enable(mode)


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
    _state["tests"] += 1
    if outcome.excinfo is None:
        if t["backend"]:
            _state["ran"] += 1
        else:
            _state["hollow"] += 1
            item.user_properties.append(("tf_backend_hollow", True))


def pytest_terminal_summary(terminalreporter):
    if _state["mode"] == "off":
        return
    terminalreporter.write_line(
        f"tf_backend ({_state['mode']}): {_state['ran']} passing tests ran our kernels, "
        f"{_state['hollow']} hollow passes (no backend kernel ran), {_state['tests']} tests")
