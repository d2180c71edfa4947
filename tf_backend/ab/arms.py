"""The arms of a comparison: (stock | ours) x (eager | tf.function | XLA), one callable each.

"ours function" runs a tf.function with the backend enabled: whether its body ran on our
executor, and which nodes fell back to TensorFlow, shows in the ledger's "functions" section.
XLA is a stock-only arm (jit_compile functions are left to TensorFlow).
"""
import numpy as np

import tf_backend

# (arm name, side, mode); order is the report order.
ALL = (("stock_eager", "stock", "eager"), ("stock_function", "stock", "function"),
       ("stock_xla", "stock", "xla"), ("ours_eager", "ours", "eager"),
       ("ours_function", "ours", "function"))
LABELS = {"stock_eager": "stock eager", "stock_function": "stock tf.function",
          "stock_xla": "stock XLA", "ours_eager": "ours eager",
          "ours_function": "ours tf.function", "stock_script": "stock", "ours_script": "ours"}
PAIRS = (("ours_eager", "stock_eager"), ("ours_function", "stock_function"),
         ("ours_eager", "stock_function"), ("ours_eager", "stock_xla"))


class Arm:
    def __init__(self, name, side, mode, call):
        self.name, self.side, self.mode, self.call = name, side, mode, call
        self.error = None      # "Type: message" once the arm failed; it is then skipped
        self.outputs = None    # host copies of the last warm-up outputs


def use_side(side):
    """Enable the backend for "ours", disable it for "stock" (no-op when already there)."""
    want = "on" if side == "ours" else "off"
    if tf_backend.mode() == want:
        return
    if want == "off":
        tf_backend.disable()
    elif not tf_backend.enable("on"):
        raise RuntimeError("tf_backend could not be enabled (unverified TensorFlow version? "
                           "set TF_BACKEND_FORCE=1)")


def to_host(tf, out):
    """Flat list of numpy arrays; converting forces the result to exist on the host."""
    return [np.asarray(t) for t in tf.nest.flatten(out)]


def make(tf, fn, inputs, names=None):
    """Arms for fn(*inputs); `names` limits them (default: all five)."""
    arms = []
    for name, side, mode in ALL:
        if names is not None and name not in names:
            continue
        if mode == "eager":
            f = fn
        else:
            f = tf.function(fn, jit_compile=(mode == "xla"))

        def call(f=f):
            return to_host(tf, f(*inputs))

        arms.append(Arm(name, side, mode, call))
    return arms


def select(modes, xla=True):
    """Arm names for a set of modes ("eager", "function"); XLA rides with "function"."""
    names = []
    for name, _, mode in ALL:
        m = "function" if mode == "xla" else mode
        if m in modes and (xla or mode != "xla"):
            names.append(name)
    return names
