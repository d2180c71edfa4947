"""Function choices kept between processes: the whole-function trial's choice (functions._choose)
is written to `<cache dir>/function_choices.json`. The next process that calls the same
function skips the trial: a function TensorFlow won is not compiled at all (TensorFlow runs it
from the first call, as in stock); one our executor won runs on it from the first call, measured
again after CHOICE_RECHECK calls as in the process that chose (a trial's first call on
TensorFlow is its graph optimisation: 0.27 s of a 2.6 s recurrent fit).

Why: a trial costs the program's compile, its first (cold) run and a dozen calls on the slower
side. On the recurrent classifier of issue 15 (AMD EPYC, 2 cores) that was 0.4-0.8 s of a
3.1-3.2 s fit that TensorFlow then ran at its own speed anyway; a user re-running a script
paid it every time.

Key: a digest of the function's graph (its GraphDef as text, nested functions included and
renamed in the order the graph reaches them, process-wide uids in node names and custom
gradients' op types numbered: _canonical), the argument signature (dtypes and
shapes), the CPU (shape_fns.host.cpu_key), the TensorFlow and NumPy versions and a digest of
this package's sources (kernels/, shape_fns/, tf_backend/), so a change to our code or another
machine measures again.

TF_BACKEND_FUNCTION_CHOICE: "measure" (default) reads and writes the records; "remeasure"
ignores them and writes what it measures; "off" neither (every function on our executor).
"""
import hashlib
import json
import os
import re
import threading

import kernels

TABLE = "function_choices.json"   # in kernels.cache_dir()
MAX_ENTRIES = 4096                # oldest dropped beyond this

_lock = threading.Lock()
_table = kernels.CacheTable(TABLE)
_code = []


def _code_digest():
    """sha1 over this package's, kernels/' and shape_fns/' Python sources (read once)."""
    if not _code:
        here = os.path.dirname(os.path.abspath(__file__))
        roots = [here, os.path.join(os.path.dirname(here), "kernels"),
                 os.path.join(os.path.dirname(here), "shape_fns")]
        h = hashlib.sha1()
        for root in roots:
            for d, subdirs, files in os.walk(root):
                subdirs[:] = sorted(s for s in subdirs if s != "__pycache__")
                for f in sorted(files):
                    if f.endswith(".py"):
                        p = os.path.join(d, f)
                        h.update(os.path.relpath(p, os.path.dirname(here)).encode())
                        with open(p, "rb") as fh:
                            h.update(fh.read())
        _code.append(h.hexdigest()[:16])
    return _code[0]


def key(graph, args):
    """The record's key for a FuncGraph called with `args` (tensors), or None when the graph
    cannot be serialised."""
    import numpy as np
    from shape_fns.host import cpu_key
    from . import tf_adapter as tfa
    try:
        gd = _canonical(graph.as_graph_def())
    except Exception:   # noqa: BLE001 - no record for this one; the trial runs
        return None
    sig = []
    for a in args:
        dt = getattr(a, "dtype", None)
        try:
            shape = tfa.shape_tuple(a)
        except Exception:   # noqa: BLE001 - not an EagerTensor
            shape = None
        sig.append([getattr(dt, "name", str(dt)), shape])
    return json.dumps([hashlib.sha1(gd).hexdigest(), sig, cpu_key(), tfa.tf_version(),
                       np.__version__, _code_digest()], default=str)


def _canonical(gd):
    """The GraphDef's text with its library functions renamed F0, F1, ... in the order the
    graph reaches them, and its numeric node names U0, U1, ...: both come from process-wide
    counters (`..._while_body_176`, a capture's "22290") that any other function traced first
    moves (one of our kernels compiling in the background and its op run by TensorFlow
    meanwhile was enough: the same training step got four keys in four processes)."""
    by_name = {f.signature.name: f for f in gd.library.function}
    top = "".join(str(n) for n in gd.node)
    # captured values' placeholders are named by a process-wide uid too ("22290"): numbered
    # in graph order, wherever a string starts with one
    uids = {}
    for n in gd.node:
        if n.name.isdigit():
            uids[n.name] = f"U{len(uids)}"
    if uids:
        top = re.sub(r'"(\d+)(?=[":])', lambda m: '"' + uids.get(m.group(1), m.group(1)), top)
    if not by_name:
        return _gradient_uids(top).encode()
    pat = re.compile("|".join(re.escape(n) for n in sorted(by_name, key=len, reverse=True)))
    order, texts = {}, [top]
    i = 0
    while i < len(texts):
        for m in pat.finditer(texts[i]):
            n = m.group(0)
            if n not in order:
                order[n] = f"F{len(order)}"
                texts.append(str(by_name[n]))
        i += 1
    return _gradient_uids("\n".join(pat.sub(lambda m: order[m.group(0)], t)
                                     for t in texts)).encode()


def _gradient_uids(text):
    """A custom gradient's op type ("CustomGradient-846", the `_gradient_op_type` attr of a
    tf.custom_gradient's ops: a Keras optimizer's step has one, adam/IdentityN) ends in a
    process-wide uid too: numbered in text order (a Keras fit's step got a key of its own in
    every process, so every process ran its trial)."""
    uids = {}
    return re.sub(r"CustomGradient-(\d+)",
                  lambda m: "CustomGradient-G%d" % uids.setdefault(m.group(1), len(uids)), text)


def any_recorded():
    """Whether there is a record at all (no key worth computing otherwise)."""
    with _lock:
        return bool(_table.value())


def recorded(k):
    """The record for key `k` ({"runs", "ours_ms", "tensorflow_ms"}), or None."""
    with _lock:
        return _table.value().get(k)


def record(k, ours_s, tensorflow_s, runs="tensorflow"):
    """Keep the choice `runs` for key `k` (an unwritable cache directory is not an error).
    The file is read again first, so what other processes recorded meanwhile stays."""
    with _lock:
        _table.forget()
        t = _table.value()
        t.pop(k, None)   # the newest last (the oldest are dropped beyond MAX_ENTRIES)
        t[k] = {"runs": runs, "ours_ms": round(ours_s * 1e3, 4),
                "tensorflow_ms": round(tensorflow_s * 1e3, 4)}
        while len(t) > MAX_ENTRIES:
            t.pop(next(iter(t)))
        try:
            _table.save()
        except OSError:
            pass


def forget():
    """Drop what was read (tests point the cache directory elsewhere)."""
    with _lock:
        _table.forget()
