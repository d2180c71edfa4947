"""Shadow mode (TF_BACKEND=shadow): every op we own runs on our kernel and on TensorFlow's; the
user gets TensorFlow's result; differences beyond the numerics contract are recorded with op,
input shapes and dtypes, error size and the user's source line. The report keeps the first and
the worst divergences."""
import os
import sys
import threading

import numpy as np

from . import numerics

KEEP = 20
_lock = threading.Lock()
_state = {"checked": 0, "divergences": 0, "first": [], "worst": []}
_OWN = (os.sep + "tensorflow" + os.sep, os.sep + "keras" + os.sep, os.sep + "tf_backend" + os.sep,
        os.sep + "numpy" + os.sep, os.sep + "absl" + os.sep, "<frozen")


def user_line():
    """'file:line in fn' of the innermost frame outside TensorFlow, Keras and us."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not any(p in name for p in _OWN):
            return f'File "{name}", line {f.f_lineno}, in {f.f_code.co_name}'
        f = f.f_back
    return ""


def _kind(op):
    from kernels.elementwise_table import TABLE
    return "elementwise" if op in TABLE else "reduction"


def check(op, inputs, ours, ref, where, ours_error=None, ref_error=None):
    """Compare one op's outputs (numpy arrays) or errors; record a divergence if any."""
    detail = None
    if ours_error is not None or ref_error is not None:
        if type(ours_error) is not type(ref_error) and not (
                ours_error is not None and ref_error is not None
                and getattr(ours_error, "code", 0) == getattr(ref_error, "error_code", -1)):
            detail = (f"error mismatch: ours {type(ours_error).__name__ if ours_error else 'ok'}, "
                      f"TensorFlow {type(ref_error).__name__ if ref_error else 'ok'}")
        err = (float("inf"), float("inf"))
    else:
        n = max([int(np.prod(a.shape)) for a in inputs] + [1])
        for o, r in zip(ours, ref):
            msg = numerics.compare(o, r, _kind(op), n)
            if msg is not None:
                detail = msg
                break
        err = max((numerics.max_errors(o, r) for o, r in zip(ours, ref)
                   if o.shape == r.shape and o.dtype.kind in "fc"), default=(0.0, 0.0))
    with _lock:
        _state["checked"] += 1
        if detail is None:
            return
        _state["divergences"] += 1
        rec = {"op": op, "inputs": ", ".join(f"{a.dtype.name}[{','.join(map(str, a.shape))}]"
                                             for a in inputs),
               "max_abs": err[0], "max_rel": err[1], "detail": detail, "where": str(where),
               "seq": _state["checked"]}
        if len(_state["first"]) < KEEP:
            _state["first"].append(rec)
        worst = _state["worst"]
        worst.append(rec)
        worst.sort(key=lambda r: (-r["max_rel"], r["seq"]))
        del worst[KEEP:]


def report():
    with _lock:
        return {"checked": _state["checked"], "divergences": _state["divergences"],
                "first": list(_state["first"]), "worst": list(_state["worst"])}


def reset():
    with _lock:
        _state.update({"checked": 0, "divergences": 0, "first": [], "worst": []})


def format_report(rep):
    lines = [f"shadow: {rep['checked']} op executions compared, {rep['divergences']} diverged"]
    for title, key in (("first", "first"), ("worst", "worst")):
        if rep[key]:
            lines.append(f"  {title} divergences:")
            for r in rep[key][:5]:
                lines.append(f"    {r['op']}({r['inputs']}): max abs {r['max_abs']:.3g}, max rel "
                             f"{r['max_rel']:.3g} — {r['detail']}\n      at {r['where']}")
    return "\n".join(lines)
