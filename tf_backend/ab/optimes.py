"""Per-op-type times of an eager run, from a separate instrumented run of each side.

While recording, the two eager entry points (fast path and slow path execute) are wrapped at the
outermost level, around whatever is installed (stock TensorFlow or our hooks), and restored
afterwards; nothing switches sides in between. A wrapper times each call by op type; a call that
bounces from the fast path to the slow path is counted once and both parts are timed. Nested
calls are attributed to the outer op. The wrappers add about 1 µs per op on both sides alike.
Only eager ops pass through these entry points: tf.function bodies run inside the executor and
show up as one function call.
"""
import contextlib
import time

from .. import tf_adapter as tfa
from . import arms as arms_mod

_ENTRY_POINTS = ("TFE_Py_FastPathExecute", "TFE_Py_Execute", "TFE_Py_ExecuteCancelable")


class Recorder:
    def __init__(self):
        self.ops = {}     # op type -> [calls, seconds]
        self.depth = 0

    def add(self, op, seconds, counted):
        if isinstance(op, bytes):  # the slow path may receive the op name as bytes
            op = op.decode()
        if op.startswith("__inference") or op.startswith("__forward"):
            op = "<function call>"
        s = self.ops.setdefault(op, [0, 0.0])
        s[0] += counted
        s[1] += seconds


def _wrap(rec, orig, op_index, counts_on_error):
    perf = time.perf_counter

    def timed(*args):
        if rec.depth:
            return orig(*args)
        rec.depth = 1
        t0 = perf()
        try:
            out = orig(*args)
        except BaseException:
            rec.add(args[op_index], perf() - t0, counts_on_error)
            raise
        finally:
            rec.depth = 0
        rec.add(args[op_index], perf() - t0, 1)
        return out

    return timed


@contextlib.contextmanager
def recording():
    """Record per-op-type times of eager ops run inside the block."""
    pywrap = tfa.pywrap()
    rec = Recorder()
    saved = {n: getattr(pywrap, n) for n in _ENTRY_POINTS if hasattr(pywrap, n)}
    # fast path: (ctx, op_name, ...); an exception there is usually a bounce to the slow path
    # (which counts the call), so it adds time but not a call. Slow paths: (ctx, device, op, ...).
    for n, orig in saved.items():
        fast = n == "TFE_Py_FastPathExecute"
        setattr(pywrap, n, _wrap(rec, orig, 1 if fast else 2, 0 if fast else 1))
    try:
        yield rec
    finally:
        for n, orig in saved.items():
            setattr(pywrap, n, orig)


def profile(arm, calls=3):
    """{"calls", "wall_s", "op_s", "ops": [{"op", "calls", "total_s"}]} per call of `arm`."""
    arms_mod.use_side(arm.side)
    arm.call()  # re-warm after the side switch, outside the recording
    with recording() as rec:
        t0 = time.perf_counter()
        for _ in range(calls):
            arm.call()
        wall = time.perf_counter() - t0
    ops = [{"op": op, "calls": c / calls, "total_s": s / calls}
           for op, (c, s) in rec.ops.items()]
    ops.sort(key=lambda o: -o["total_s"])
    return {"calls": calls, "wall_s": wall / calls, "op_s": float(sum(o["total_s"] for o in ops)),
            "ops": ops}
