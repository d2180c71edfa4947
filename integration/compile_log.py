"""A pytest plugin that logs every numba compile of the run, per test: where a cold run's time
goes (on 2 cores most of it is numba compiling). Each process appends lines
"<test id>\t<module.function>\t<seconds>" to $TFB_COMPILE_LOG_DIR/compile_<pid>.tsv (outermost
compiles only: a callee compiled inside its caller counts in the caller's time).

    TFB_COMPILE_LOG_DIR=/tmp/clog .venv/bin/python -m pytest -q -n 2 -p integration.compile_log
    cat /tmp/clog/*.tsv | sort -t$'\\t' -k3 -rn | head        # the longest compiles
"""
import os
import threading
import time

_state = threading.local()


def pytest_configure(config):
    from numba.core import event
    out_dir = os.environ.get("TFB_COMPILE_LOG_DIR")
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    out = open(os.path.join(out_dir, f"compile_{os.getpid()}.tsv"), "a", buffering=1)

    class Listener(event.Listener):
        def on_start(self, ev):
            depth = getattr(_state, "depth", 0)
            _state.depth = depth + 1
            if depth == 0:
                _state.t0 = time.perf_counter()

        def on_end(self, ev):
            _state.depth -= 1
            if _state.depth:
                return
            fn = getattr(ev.data.get("dispatcher"), "py_func", None)
            name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '?')}"
            test = os.environ.get("PYTEST_CURRENT_TEST", "-").rsplit(" ", 1)[0]
            out.write(f"{test}\t{name}\t{time.perf_counter() - _state.t0:.3f}\n")

    event.register("numba:compile", Listener())
