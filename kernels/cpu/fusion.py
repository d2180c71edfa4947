"""Fused elementwise kernels for the CPU: one generated numba loop for a chain of table ops.

A fusion spec is pure data: the dtype, the number of external inputs, and steps
(op, operands, params) where an operand is ("in", k) or ("t", j) (the j-th step's result).
The output is viewed as (rows, cols) and each input is read by a pattern: "f" (same size as
the output), "s" (one element), "o" (one value per row, e.g. a [1,128,1] mean against
[1,128,768]) or "i" (one value per column, e.g. a [768] scale). Groups of "f"/"s" inputs only
use a flat loop. The generated loop reads each input once per element, evaluates
the steps with the elementwise table's scalar functions, rounding every intermediate to the
dtype as the unfused ops would, and writes one output: one pass over memory instead of one per op.

In place (the output buffer is one of the inputs) the loop has its own variant that reads that
input through `out`: LLVM cannot prove that two argument arrays at the same address are safe to
vectorise, so passing the buffer twice runs the scalar fallback loop (about 10x slower, measured
on ResNet-50's batch-norm epilogues).
"""
import hashlib
import os
import threading

import numba
import numpy as np

from kernels.cpu import elementwise as ew
from kernels.cpu import reduction_ops
from kernels.cpu.scalar import HW_FLUSH
from kernels.elementwise_table import TABLE

_lock = threading.Lock()
_built = {}

# Parallel from 2 cores: ResNet-50's batch-norm/residual epilogues (e.g. a (3136, 256) affine +
# Relu) ran faster on both threads of the team once the GEMMs themselves ran there
# (kernels/cpu/gemm.py) and the parallel kernel was one serial loop per thread. (Earlier
# measurements that made this serial below 8 cores were of a parallel loop LLVM did not
# vectorise, run while OpenBLAS's own threads still spun after a GEMM.)
PARALLEL = (os.cpu_count() or 1) >= 2
ROW_BLOCK = reduction_ops._BLOCK   # rows-sum loops: the same partial sums as reduction_ops'


def fusable(op, dtype):
    """Can `op` on `dtype` join a fused loop? (float32/float64, same-dtype output, no error
    checks; float16/bfloat16 ops stay unfused: their kernels round per op from float32)."""
    e = TABLE.get(op)
    dt = np.dtype(dtype)
    if e is None or e.out != "same" or e.arity not in (1, 2) or dt.kind != "f" or dt.itemsize < 4:
        return False
    if getattr(e, "check", None) or (op, dt.name) in ew.STOCK_TAIL:
        return False   # error checks; stock's scalar-tail values (elementwise.STOCK_TAIL)
    return np.dtype(dtype).name in {np.dtype(d).name for d in e.dtypes} and e.expr_for("f") is not None


def _inline_ops(steps):
    """Per-step scalar functions for float32/float64 written from the table's expressions:
    `_sw{j}` flushes its result in software, `_hw{j}` leaves that to the hardware.

    The elementwise module's `{op}_f_s` flushes subnormal inputs and result (TensorFlow's FTZ
    and DAZ). Inside a fused loop every intermediate is a result already flushed, so in software
    only the external inputs need flushing, once each. On x86-64 the serial loop instead sets
    MXCSR's FTZ/DAZ bits for its duration, as TensorFlow's threads run, and flushes nothing in
    code. Measured on a 9-op GELU chain over 98,304 float32 elements: 205 us flushing every
    operand, 132 us flushing inputs once and every result, 65 us with the hardware flush."""
    defs = []
    for j, (op, operands, params) in enumerate(steps):
        e = TABLE[op]
        args = ", ".join(["x", "y"][:e.arity] + list(e.params))
        keep = e.keep_subnormal   # a bit operation: the result keeps a subnormal's bits
        for name, expr in ((f"_sw{j}", f"{'' if keep else 'ftz'}(cst(x, {e.expr_for('f')}))"),
                           (f"_hw{j}", f"cst(x, {e.expr_for('f')})")):
            defs.append(f"@njit(inline='always', nogil=True, error_model='numpy')\n"
                        f"def {name}({args}):\n    return {expr}\n")
    return "\n".join(defs)


_READS = {"f": "x{k}[i]", "s": "s{k}", "o": "x{k}[r]", "i": "x{k}[c]"}


def _loop_body(dtype, n_in, steps, patterns, alias, mode, pad=None, store="out[i]",
               read=_READS):
    """mode: "sw" (flush subnormals in code) or "hw" (the loop runs under FTZ/DAZ)."""
    cast = f"np.{np.dtype(dtype).name}"
    flat = all(p in "fs" for p in patterns)
    flush = "ftz({})" if mode == "sw" else "{}"
    pad = " " * (pad if pad is not None else 8 if flat else 12)
    pre = [f"    s{k} = " + flush.format(f"x{k}[0]") for k in range(n_in) if patterns[k] == "s"]
    body = [pad + f"v{k} = " + (flush.format("out[i]") if k == alias else
                                read[patterns[k]].format(k=k) if patterns[k] == "s" else
                                flush.format(read[patterns[k]].format(k=k)))
            for k in range(n_in)]
    for j, (op, operands, params) in enumerate(steps):
        args = [f"v{r}" if kind == "in" else f"t{r}" for kind, r in operands]
        args += [repr(float(p)) for p in params]
        body.append(pad + f"t{j} = {cast}(_{mode}{j}({', '.join(args)}))")
    body.append(pad + f"{store} = t{len(steps) - 1}")
    return pre, body, flat


def _source(dtype, n_in, steps, patterns, alias=None):
    ins = "".join(f"x{k}, " for k in range(n_in) if k != alias)
    # numba's worker threads do not inherit our MXCSR: in "hw" mode the loop sets it itself
    mode = "hw" if HW_FLUSH else "sw"
    pre, body, flat = _loop_body(dtype, n_in, steps, patterns, alias, mode)
    if mode == "hw":
        pre = ["    csr = fp_env_get()", "    fp_env_set(csr | FTZ_DAZ)"] + pre
    pre_s = "\n".join(pre) + "\n" if pre else ""
    loop_body = "\n".join(body)
    if flat:
        loop = f"{pre_s}    for i in range(out.size):\n{loop_body}\n"
    else:
        loop = (f"{pre_s}    for r in range(rows):\n        base = r * cols\n"
                f"        for c in range(cols):\n            i = base + c\n{loop_body}\n")
    if mode == "hw":
        loop += "    fp_env_set(csr)\n"
    # The parallel kernel runs the serial loop on one block of rows per thread. (A prange over
    # the rows themselves compiles to a loop LLVM does not vectorise: 6x slower per element.)
    unit = "1" if flat else "cols"
    part = {"f": "x{k}[lo * %s:hi * %s]" % (unit, unit), "o": "x{k}[lo:hi]", "i": "x{k}",
            "s": "x{k}"}
    args = "".join(part[patterns[k]].format(k=k) + ", " for k in range(n_in) if k != alias)
    rows_expr = "out.size" if flat else "rows"
    ploop = (f"    n = {rows_expr}\n    parts = min(threads, n)\n"
             f"    for p in prange(parts):\n        lo = n * p // parts\n"
             f"        hi = n * (p + 1) // parts\n"
             f"        loop({args}out[lo * {unit}:hi * {unit}], hi - lo, cols)\n")
    head = ('"""Generated by kernels/cpu/fusion.py; do not edit."""\n'
            "import math\nimport numpy as np\nfrom numba import njit, prange\n"
            "from kernels.cpu.scalar import *  # noqa\n\n" + _inline_ops(steps) + "\n")
    sig = f"({ins}out, rows, cols)"
    return (head + f"@njit(cache=True, nogil=True, error_model='numpy')\ndef loop{sig}:\n"
            + loop + f"\n@njit(cache=True, nogil=True, parallel=True, error_model='numpy')\n"
            f"def ploop({ins}out, rows, cols, threads):\n" + ploop)


def build(dtype, n_in, steps, patterns, alias=None):
    """(serial, parallel) numba kernels for a fusion spec, generated and cached on disk.

    alias: the index of an input ("f" pattern) that is the output buffer itself; the kernels
    then take that input only as `out` (see the module doc). dtype: float32 or float64 (what
    `fusable` admits)."""
    steps = tuple((op, tuple(map(tuple, operands)), tuple(params)) for op, operands, params in steps)
    if alias is not None and patterns[alias] != "f":
        raise ValueError(f"in-place input {alias} must be read fully, not {patterns[alias]!r}")
    key = (np.dtype(dtype).name, n_in, steps, tuple(patterns), alias)
    return _cached(key, lambda: _source(dtype, n_in, steps, patterns, alias))


def _cached(key, make_source):
    """(loop, ploop) built once per key: from the generated source, written to disk once."""
    got = _built.get(key)
    if got is None:
        with _lock:
            got = _built.get(key)
            if got is None:
                got = _built[key] = _load(make_source())
    return got


def _load(src):
    """(loop, ploop) of a generated module. Call with _lock held."""
    digest = hashlib.sha1((src + ew.GEN.__name__).encode()).hexdigest()[:16]
    mod = ew.import_generated(src, f"fused_cpu_{digest}.py", f"_tf_backend_fused_{digest}")
    return mod.loop, mod.ploop


def _rows_sum_source(dtype, n_in, steps, patterns):
    """A loop over (rows, cols) that evaluates the steps and sums each row into out[r]: the
    values of each block of ROW_BLOCK columns go to a small buffer that reduction_ops'
    _block_sum adds up, the blocks' sums added in order, as its row sums do."""
    ins = "".join(f"x{k}, " for k in range(n_in))
    cast = f"np.{np.dtype(dtype).name}"
    mode = "hw" if HW_FLUSH else "sw"
    # each block's inputs as views indexed by the loop counter itself: an index computed from
    # it (base + b + q) keeps numba's negative-index check, which stops LLVM vectorising
    # (measured 3x slower than the unfused pair)
    pre, body, _ = _loop_body(dtype, n_in, steps, patterns, None, mode, pad=16, store="buf[q]",
                              read={"f": "w{k}[q]", "i": "w{k}[q]", "o": "o{k}", "s": "s{k}"})
    views = {"f": "            w{k} = x{k}[base + b:base + b + m]",
             "i": "            w{k} = x{k}[b:b + m]"}
    block = "\n".join(views[p].format(k=k) for k, p in enumerate(patterns) if p in views)
    rowv = "\n".join(f"        o{k} = x{k}[r]" for k, p in enumerate(patterns) if p == "o")
    if mode == "hw":
        pre = ["    csr = fp_env_get()", "    fp_env_set(csr | FTZ_DAZ)"] + pre
    pre_s = "\n".join(pre) + "\n" if pre else ""
    loop = (f"{pre_s}    zero = {cast}(0)\n    buf = np.empty(min(cols, {ROW_BLOCK}), {cast})\n"
            f"    for r in range(rows):\n        base = r * cols\n        acc = zero\n"
            + (rowv + "\n" if rowv else "")
            + f"        for b in range(0, cols, {ROW_BLOCK}):\n"
            f"            m = min({ROW_BLOCK}, cols - b)\n"
            + (block + "\n" if block else "")
            + "            for q in range(m):\n"
            + "\n".join(body) + "\n            acc += _block_sum(buf[:m], zero)\n"
            "        out[r] = acc\n")
    if mode == "hw":
        loop += "    fp_env_set(csr)\n"
    part = {"f": "x{k}[lo * cols:hi * cols]", "o": "x{k}[lo:hi]", "i": "x{k}", "s": "x{k}"}
    args = "".join(part[patterns[k]].format(k=k) + ", " for k in range(n_in))
    ploop = ("    parts = min(threads, rows)\n    for p in prange(parts):\n"
             "        lo = rows * p // parts\n        hi = rows * (p + 1) // parts\n"
             f"        loop({args}out[lo:hi], hi - lo, cols)\n")
    head = ('"""Generated by kernels/cpu/fusion.py; do not edit."""\n'
            "import math\nimport numpy as np\nfrom numba import njit, prange\n"
            "from kernels.cpu.scalar import *  # noqa\n"
            "from kernels.cpu.reduction_ops import _block_sum\n\n" + _inline_ops(steps) + "\n")
    return (head + f"@njit(cache=True, nogil=True, error_model='numpy')\n"
            f"def loop({ins}out, rows, cols):\n" + loop
            + f"\n@njit(cache=True, nogil=True, parallel=True, error_model='numpy')\n"
            f"def ploop({ins}out, rows, cols, threads):\n" + ploop)


def build_rows_sum(dtype, n_in, steps, patterns):
    """(serial, parallel) kernels that evaluate a fusion spec over (rows, cols) and write each
    row's sum: an elementwise chain and the Sum/Mean over its trailing axes in one pass, the
    chain's values never stored whole."""
    steps = tuple((op, tuple(map(tuple, operands)), tuple(params)) for op, operands, params in steps)
    key = ("rows_sum", np.dtype(dtype).name, n_in, steps, tuple(patterns))
    return _cached(key, lambda: _rows_sum_source(dtype, n_in, steps, patterns))


def run_rows_sum(kernels_pair, inputs, out, rows, cols, n_ops):
    """out (rows,) <- the row sums of the chain over (rows, cols)."""
    _call(kernels_pair, [a.reshape(-1) for a in inputs], out, rows, cols,
          splits(rows * cols, n_ops) and rows >= 2)


def plan(in_shapes, out_shape):
    """(patterns, rows, cols) for reading inputs in a loop over out_shape, or None when some
    input's broadcast fits no single rows/cols split (the caller then runs unfused)."""
    out_shape = tuple(out_shape)
    nd = len(out_shape)
    n = 1
    for d in out_shape:
        n *= d
    padded = [(1,) * (nd - len(s)) + tuple(s) for s in in_shapes]
    if all(p == out_shape or all(d == 1 for d in p) for p in padded):
        return ["f" if p == out_shape else "s" for p in padded], n, 1
    for k in range(nd - 1, 0, -1):
        outer, inner = out_shape[:k], out_shape[k:]
        pats = []
        for p in padded:
            if p == out_shape:
                pats.append("f")
            elif all(d == 1 for d in p):
                pats.append("s")
            elif p[:k] == outer and all(d == 1 for d in p[k:]):
                pats.append("o")
            elif all(d == 1 for d in p[:k]) and p[k:] == inner:
                pats.append("i")
            else:
                break
        else:
            rows = 1
            for d in outer:
                rows *= d
            return pats, rows, n // max(rows, 1)
    return None


def alias_of(inputs, out):
    """The index of the input that is `out` itself (in place), else None."""
    for k, a in enumerate(inputs):
        if a is out:
            return k
    return None


def splits(size, n_ops):
    """Whether a fused loop writing `size` elements in `n_ops` steps runs on numba's team
    (given at least 2 threads and a plan of 4 rows or more)."""
    return PARALLEL and size * max(n_ops, 1) >= ew.PARALLEL_MIN


def run(kernels_pair, inputs, out, rows, cols, n_ops=1, alias=None):
    """Run a built fused kernel over out viewed as (rows, cols); n_ops scales the work.

    With `alias` (the kernels were built for it) that input is not passed: it is `out`."""
    if out.size == 0:
        return
    _call(kernels_pair, [a.reshape(-1) for k, a in enumerate(inputs) if k != alias], out, rows,
          cols, splits(out.size, n_ops) and (cols == 1 or rows >= 4))


def _call(kernels_pair, arrays, out, rows, cols, parallel):
    """The parallel kernel where asked and numba gives this thread more than one, else the
    serial one."""
    loop, ploop = kernels_pair
    if parallel:
        threads = numba.get_num_threads()
        if threads > 1:
            ploop(*arrays, out.reshape(-1), rows, cols, threads)
            return
    loop(*arrays, out.reshape(-1), rows, cols)
