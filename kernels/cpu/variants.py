"""Measured choice between kernels that compute one op on the same operands (their sums in
different orders, within the numerics contract; never different with the threads), as gemm.py
chooses a product's kernel: on a key's first call each candidate runs on the call's own
operands into its own scratch output, once to warm up and then RUNS times in turn, and the
fastest by its minimum is kept for the process and in `<cache dir>/variant_choice.json` per
CPU model and numba pool (TF_BACKEND_AUTOTUNE=measure measures again; with
TF_BACKEND_GEMM_RECORD=0, as in the test suite, choices stay in the process). TF-free."""
import os
import threading
import time

import kernels

RUNS = 5
VERSION = 1          # bumped when a family's candidates change: its choices are measured anew
TABLE = "variant_choice.json"
_choices = {}        # "family|key" -> candidate name, this process
_table = {"value": None}
_lock = threading.Lock()
stats = {"measured": 0, "loaded": 0}


def _host():
    from numba import config
    from shape_fns.host import cpu_key
    return f"{cpu_key()} pool={config.NUMBA_NUM_THREADS} v{VERSION}"


def _disk():
    if _table["value"] is None:
        _table["value"] = kernels.host_choices(TABLE, _host())
    return _table["value"]


def _record(name, choice):
    if os.environ.get("TF_BACKEND_GEMM_RECORD", "1") != "0":
        kernels.record_choice(TABLE, _host(), name, choice)


def name(family, key):
    """The name a choice for (family, key) is kept under."""
    return family + "|" + "|".join(map(str, key))


def choose(family, key, cands):
    """The name of the candidate to run for (family, key); cands: {name: fn()} in order of
    preference on a tie, each fn computing the op into a scratch output of its own."""
    return choose_named(name(family, key), cands)


def chosen(name):
    """The choice this process already made (or loaded) for `name`, or None: a caller can skip
    building its candidates."""
    return _choices.get(name)


def choose_named(name, cands):
    """choose() for a name made by name()."""
    got = _choices.get(name)
    if got in cands:
        return got
    with _lock:
        got = _disk().get(name)
        if got in cands:
            _choices[name] = got
            stats["loaded"] += 1
            return got
    best = dict.fromkeys(cands, float("inf"))
    for fn in cands.values():
        fn()
    for _ in range(RUNS):
        for c, fn in cands.items():
            t0 = time.perf_counter()
            fn()
            best[c] = min(best[c], time.perf_counter() - t0)
    order = list(cands)
    got = min(order, key=lambda c: (best[c], order.index(c)))
    with _lock:
        _choices[name] = got
        _disk()[name] = got
        stats["measured"] += 1
        _record(name, got)
    return got
