"""Chrome trace-event output (TF_BACKEND_TRACE=trace.json; opens in Perfetto / chrome://tracing).

Spans: one per eager op (our kernel or TensorFlow's), one per program node, one per tf.function
call, with device, thread and input shapes. When tracing is off the executor and the function
hook pay one flag check; eager hooks are installed without tracing at all.
"""
import atexit
import json
import os
import threading
import time

ON = False
_events = []
_path = None
_t0 = time.perf_counter()
_registered = False


def start(path):
    global ON, _path, _registered
    _path = path
    ON = True
    if not _registered:
        _registered = True
        atexit.register(lambda: _path and write(_path))


def stop():
    global ON
    ON = False


def now():
    return time.perf_counter()


def span(name, cat, t0, t1=None, **args):
    t1 = time.perf_counter() if t1 is None else t1
    _events.append({"name": name, "cat": cat, "ph": "X", "ts": (t0 - _t0) * 1e6,
                    "dur": (t1 - t0) * 1e6, "pid": os.getpid(), "tid": threading.get_ident(),
                    "args": args})


def shapes(values):
    out = []
    for v in values:
        shape = getattr(v, "shape", None)
        dt = getattr(getattr(v, "dtype", None), "name", None)
        if shape is not None:
            out.append(f"{dt}[{','.join(str(d) for d in tuple(shape))}]")
    return ", ".join(out)


def events():
    return list(_events)


def reset():
    _events.clear()


def write(path):
    names = [{"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": t.ident,
              "args": {"name": t.name}} for t in threading.enumerate()]
    with open(path, "w") as f:
        json.dump({"traceEvents": names + list(_events), "displayTimeUnit": "ms"}, f)
