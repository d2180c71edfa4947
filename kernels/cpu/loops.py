"""Compiled loops: a While whose condition and body are all ops with an inline numba form becomes
one generated numba function with the loop inside (Keras' LSTM and GRU layers: 80 body runs of
10-46 nodes per forward or gradient, each node a Python call in the interpreter). TF-free.

The input is data, a `kernels.regions.Loop` (built by tf_backend/program/passes/compile_loops.py from the
While's sub-programs): the loop variables' types, and the condition's and body's steps (op,
attrs, input and output slots, static output types, and for fused nodes their fusion spec or
the producer and epilogue they merge). `source(loop)` writes the function; `build(loop)`
imports it from the kernel cache (numba caches its machine code next to it).

What a value is inside the function, decided from the static types:
  scalar  a rank-0 tensor: a numba scalar of its dtype (every result cast back to it)
  array   a C-contiguous array of static shape; never written after it is made, so views
          (reshapes, list items) are safe
  list    a TensorList: a buffer [capacity, *element] plus a length; an item is buffer[i]
          (unset items read as zeros, as runtime/lists.py's do). A list op that writes (SetItem,
          PushBack) writes the buffer in place when the list it reads is not read after it,
          else a copy. `AddN(acc, SetItem(Reserve(..), i, v))` (while_v2's gradient of a read
          item) is acc[i] += v on acc's buffer.
Ops and how they inline (`EMIT`): the elementwise table's ops and fused chains, as one loop
over the output calling the table's scalar functions (TensorFlow's flushing included); AddN
as a chain of adds; MatMul through numpy's OpenBLAS sgemm/dgemm (kernels/cpu/gemm.py's
symbols); data movement ops whose other inputs are constants (Split, StridedSlice, Slice,
Transpose, ConcatV2, Pack, StridedSliceGrad, ...) as a gather by an index map computed once,
at build time, by running our own CPU kernel on element indices, so their semantics are the
kernel's; reshapes as views; Sum/Mean over leading or trailing axes and BiasAddGrad. Anything
else makes the loop ineligible (`Ineligible` names the op) and the interpreter runs it.

Errors: an index out of range or a bad list access raises inside the function; the caller then
runs the loop again in the interpreter from its inputs (nothing it was given was written), which
raises TensorFlow's error.
"""
import hashlib
import os

import numpy as np

import kernels
from kernels.cpu import elementwise as ew
from kernels.cpu import fusion, gemm, loop_split
from kernels.cpu.loop_helpers import csr_get, csr_set  # noqa: F401 - the caller's restore
from kernels.cpu.scalar import HW_FLUSH
from kernels.elementwise_table import TABLE
from kernels.regions import Ineligible, Step, Webs


LIST_OPS = {"TensorListGetItem", "TensorListSetItem", "TensorListPushBack", "TensorListPopBack",
            "TensorListReserve", "TensorListLength", "TensorListElementShape",
            "TensorListStack"}
# data movement ops: every non-host input is data, its output elements copies of input elements
# (or zeros); our own kernel computes the index map
MOVEMENT = {"Split", "SplitV", "StridedSlice", "Slice", "Transpose", "ConcatV2", "Pack",
            "Unpack", "StridedSliceGrad", "Tile", "Reverse", "ReverseV2", "GatherV2", "Pad"}
VIEWS = {"Reshape", "Squeeze", "ExpandDims"}
REDUCE = {"Sum", "Mean", "BiasAddGrad"}
FLOATS = ("float32", "float64")


def _dt(t):
    return np.dtype(t[1])


def _is_scalar(t):
    return t[0] == "a" and tuple(t[2]) == ()


class _Ctx:
    """Source being written: lines, constant-array arguments, temporaries."""

    def __init__(self, prefix, region):
        self.p, self.r = prefix, region
        self.lines = []
        self.n = 0
        self.names = {}   # slot -> the name it is read by (loop variables, arguments)

    def var(self, slot):
        got = self.names.get(slot)
        return got if got is not None else f"{self.p}{slot}"

    def type(self, slot):
        return self.r.types[slot]

    def const(self, slot):
        return self.r.consts.get(slot)

    def tmp(self):
        self.n += 1
        return f"{self.p}t{self.n}"

    def emit(self, *lines):
        self.lines.extend(lines)


class _Module:
    """The whole function's constant arrays (arguments after the loop variables) and the
    scalar functions its elementwise loops call."""

    def __init__(self):
        self.arrays = []
        self.fns = {}
        self.ext = {}   # numba functions of other generated modules: alias -> (module, name)

    def extern(self, dispatcher, name=None):
        """An alias for a compiled function of another module (fusion.py's loops: cached on
        disk and shared with the interpreter's fused nodes, so a loop's compile types a call
        instead of lowering the chain again); `name`: the dispatcher's name in its module
        where it is not its Python function's."""
        key = (dispatcher.py_func.__module__, name or dispatcher.py_func.__name__)
        for alias, k in self.ext.items():
            if k == key:
                return alias
        alias = f"X{len(self.ext)}"
        self.ext[alias] = key
        return alias

    def array(self, a):
        self.arrays.append(np.ascontiguousarray(a))
        return f"K{len(self.arrays) - 1}"


def _cast(dtype):
    return "np.bool_" if np.dtype(dtype).kind == "b" else f"np.{np.dtype(dtype).name}"


def _literal(v, dtype):
    dt = np.dtype(dtype)
    v = np.asarray(v).reshape(())[()]
    if dt.kind == "b":
        return f"np.bool_({bool(v)})"
    if dt.kind == "f":
        f = float(v)
        text = repr(f) if np.isfinite(f) else "np.nan" if f != f else "np.inf" if f > 0 else "-np.inf"
        return f"np.{dt.name}({text})"
    return f"np.{dt.name}({int(v)})"


def _operand(ctx, mod, slot):
    """The name a step reads a slot by: constants become literals (scalars) or arguments."""
    c = ctx.const(slot)
    t = ctx.type(slot)
    if c is not None:
        if t[0] == "a" and tuple(t[2]) == ():
            return _literal(c, t[1])
        return mod.array(np.asarray(c, t[1]))
    return ctx.var(slot)


# ---- elementwise ------------------------------------------------------------------------------

def _scalar_fn(mod, op, dtype):
    """The scalar function a loop calls for op on dtype: the table's expression. Floats on
    x86-64 as it is, the function running under FTZ/DAZ (set on entry, as fusion.py's loops
    do), which LLVM vectorises; TensorFlow's flushing in code (the elementwise module's
    functions) blocked that: 130 us against ~10 for an LSTM cell's gates over 64x64."""
    e = TABLE.get(op)
    if e is None:
        raise Ineligible(f"{op}: not an elementwise table op")
    k = ew.kind_of(dtype)
    if k not in ("f", "i", "u", "b") or e.expr_for(k) is None:
        raise Ineligible(f"{op}: no {np.dtype(dtype).name} expression")
    if k in e.check or (op, np.dtype(dtype).name) in ew.STOCK_TAIL or e.incompatible:
        raise Ineligible(f"{op}: error checks or stock's scalar tail on {np.dtype(dtype).name}")
    own = f"_s_{op}_{k}"
    if own not in mod.fns:
        expr = e.expr_for(k)
        if e.out == "same" and k == "f":   # other kinds: the caller's cast (as GEN's)
            expr = f"cst(x, {expr})"
            if k == "f" and not HW_FLUSH and not e.keep_subnormal:   # flush in code
                expr = f"ftz({expr})"
        pre = ""
        if k == "f" and not HW_FLUSH and not e.keep_subnormal:
            pre = "".join(f"    {v} = ftz({v})\n" for v in "xy"[:e.arity])
        args = ", ".join(["x", "y"][:e.arity] + list(e.params))
        # not inlined by numba (its IR inlining re-types the body at every call site: compile
        # time); LLVM inlines the small function anyway
        mod.fns[own] = (f"@njit(nogil=True, error_model='numpy')\n"
                        f"def {own}({args}):\n{pre}    return {expr}\n")
    return own


def _ew(ctx, mod, ins, steps, in_dtype, out_slot):
    """One loop over out_slot's elements evaluating `steps` ((op, operands, params), operands
    ("in", k) or ("t", j)) with the table's scalar functions; every intermediate is cast to its
    dtype as the unfused ops would round it."""
    out_t = ctx.type(out_slot)
    out_dt = _dt(out_t)
    shape = tuple(out_t[2])
    fns = []
    dts = []   # each step's result dtype
    for op, operands, params in steps:
        arg_dts = [np.dtype(in_dtype) if kind == "in" else dts[r] for kind, r in operands]
        fns.append(_scalar_fn(mod, op, arg_dts[0]))
        dts.append(np.dtype(bool) if TABLE[op].out == "bool" else arg_dts[0])
    if dts[-1] != out_dt:
        raise Ineligible(f"{steps[-1][0]}: result dtype {dts[-1]} is not {out_dt}")
    in_types = [ctx.type(s) for s in ins]
    names = [_operand(ctx, mod, s) for s in ins]
    e = ctx.tmp() + "e"   # this loop's temporaries: one type each (numba unifies per name)

    def body(reads, pad):
        out = []
        for j, (op, operands, params) in enumerate(steps):
            args = [reads[r] if kind == "in" else f"{e}{r}" for kind, r in operands]
            args += [repr(float(p)) if isinstance(p, float) else repr(p) for p in params]
            out.append(f"{pad}{e}{j} = {_cast(dts[j])}({fns[j]}({', '.join(args)}))")
        return out

    if shape == ():
        for t in in_types:
            if not _is_scalar(t):
                raise Ineligible("a scalar result from a non-scalar input")
        ctx.emit(*body(names, ""))
        ctx.emit(f"{ctx.var(out_slot)} = {e}{len(steps) - 1}")
        return
    got = fusion.plan([tuple(t[2]) for t in in_types], shape)
    if got is None:
        raise Ineligible(f"{steps[-1][0]}: a broadcast no loop pattern covers")
    pats, rows, cols = got
    o = ctx.var(out_slot)
    if not any(_is_scalar(t) for t in in_types) and all(
            fusion.fusable(op, in_dtype) for op, _, _ in steps):
        # float chains: fusion.py's loop for the same spec (one call to type, not a loop)
        kern = mod.extern(fusion.build(in_dtype, len(ins), steps, pats)[0])
        flat = "".join(f"{nm}.reshape(-1), " for nm in names)
        ctx.emit(f"{o} = np.empty({shape!r}, {_cast(out_dt)})",
                 f"{kern}({flat}{o}.reshape(-1), {rows}, {cols})")
        return
    ctx.emit(f"{o} = np.empty({shape!r}, {_cast(out_dt)})", f"{o}_f = {o}.reshape(-1)")
    reads = []
    for k, (nm, t, p) in enumerate(zip(names, in_types, pats)):
        if _is_scalar(t):
            reads.append(nm)
            continue
        f = ctx.tmp()
        ctx.emit(f"{f} = {nm}.reshape(-1)")
        if p == "s":
            ctx.emit(f"{f}s = {f}[0]")
            reads.append(f"{f}s")
        else:
            reads.append({"f": f"{f}[i]", "o": f"{f}[r]", "i": f"{f}[c]"}[p])
    if all(p in "fs" for p in pats):
        ctx.emit(f"for i in range({rows * cols}):")
        ctx.emit(*body(reads, "    "))
        ctx.emit(f"    {o}_f[i] = {e}{len(steps) - 1}")
    else:
        ctx.emit(f"for r in range({rows}):", f"    for c in range({cols}):",
                 f"        i = r * {cols} + c")
        ctx.emit(*body(reads, "        "))
        ctx.emit(f"        {o}_f[i] = {e}{len(steps) - 1}")


def _emit_table(ctx, mod, st):
    e = TABLE[st.op]
    params = tuple(st.attrs[p] for p in e.params)
    dt = st.attrs.get("T")
    if dt is None:
        dt = ctx.type(st.inputs[0])[1]
    ops = [(st.op, [("in", k) for k in range(e.arity)], params)]
    _ew(ctx, mod, st.inputs, ops, dt, st.outputs[0])


def _emit_fused(ctx, mod, st):
    if st.parts is not None:
        return _emit_epilogue(ctx, mod, st)
    if st.fusion is None:
        raise Ineligible(f"{st.op}: a fused node without its spec")
    dt, n_in, steps = st.fusion
    _ew(ctx, mod, st.inputs, steps, dt, st.outputs[0])


def _emit_select(ctx, mod, st):
    """SelectV2(cond, x, y) with broadcasting (Keras' masked recurrent steps): one loop over the
    output reading each input by its pattern."""
    c, x, y = st.inputs
    ot = ctx.type(st.outputs[0])
    shape, dt = tuple(ot[2]), _dt(ot)
    types = [ctx.type(v) for v in (c, x, y)]
    if _dt(types[0]).kind != "b" or _dt(types[1]) != dt or _dt(types[2]) != dt:
        raise Ineligible("SelectV2 with these dtypes")
    names = [_operand(ctx, mod, v) for v in (c, x, y)]
    o = ctx.var(st.outputs[0])
    if shape == ():
        if not all(_is_scalar(t) for t in types):
            raise Ineligible("SelectV2: a scalar result from a non-scalar input")
        ctx.emit(f"{o} = {names[1]} if {names[0]} else {names[2]}")
        return
    got = fusion.plan([tuple(t[2]) for t in types], shape)
    if got is None:
        raise Ineligible("SelectV2: a broadcast no loop pattern covers")
    pats, rows, cols = got
    reads = []
    for nm, t, p in zip(names, types, pats):
        if _is_scalar(t):
            reads.append(nm)
            continue
        f = ctx.tmp()
        ctx.emit(f"{f} = {nm}.reshape(-1)")
        reads.append({"f": f"{f}[i]", "s": f"{f}[0]", "o": f"{f}[r]", "i": f"{f}[c]"}[p])
    ctx.emit(f"{o} = np.empty({shape!r}, {_cast(dt)})", f"{o}_f = {o}.reshape(-1)",
             f"for r in range({rows}):", f"    for c in range({cols}):",
             f"        i = r * {cols} + c",
             f"        {o}_f[i] = {reads[1]} if {reads[0]} else {reads[2]}")


def _emit_addn(ctx, mod, st):
    if ctx.type(st.outputs[0])[0] == "l":
        return _emit_list_addn(ctx, mod, st)
    dt = ctx.type(st.outputs[0])[1]
    if len(st.inputs) == 1:
        ctx.emit(f"{ctx.var(st.outputs[0])} = {_operand(ctx, mod, st.inputs[0])}")
        return
    steps = [("AddV2", [("in", 0), ("in", 1)], ())]
    for k in range(2, len(st.inputs)):
        steps.append(("AddV2", [("t", k - 2), ("in", k)], ()))
    _ew(ctx, mod, st.inputs, steps, dt, st.outputs[0])


def _emit_epilogue(ctx, mod, st):
    m, n, k = st.parts
    # the producer's result into a temporary slot of its own, then the epilogue reading it
    tslot = ctx.tmp()
    ctx.r.types[tslot] = ctx.type(st.outputs[0])
    m2 = Step(m.op, m.kind, m.attrs, m.inputs, [tslot], [ctx.type(st.outputs[0])])
    _emit_step(ctx, mod, m2)
    rest = [s for s in st.inputs[len(m.inputs):]]
    rest.insert(k, tslot)
    n2 = Step(n.op, n.kind, n.attrs, rest, st.outputs, st.types, fusion=n.fusion)
    _emit_step(ctx, mod, n2)


# ---- products, reductions, movement ---------------------------------------------------------

def _emit_matmul(ctx, mod, st):
    a, b = st.inputs
    ta, tb = bool(st.attrs.get("transpose_a")), bool(st.attrs.get("transpose_b"))
    ot = ctx.type(st.outputs[0])
    dt = _dt(ot)
    if dt.name not in FLOATS or _dt(ctx.type(a)) != dt or _dt(ctx.type(b)) != dt:
        raise Ineligible(f"MatMul on {dt.name}")
    if not gemm.available():
        raise Ineligible("MatMul: numpy's OpenBLAS symbols are not available")
    o = ctx.var(st.outputs[0])
    ctx.emit(f"{o} = np.empty({tuple(ot[2])!r}, {_cast(dt)})",
             f"mm{dt.itemsize * 8}({_operand(ctx, mod, a)}, {_operand(ctx, mod, b)}, {o}, {ta}, {tb})")


def _emit_view(ctx, mod, st):
    ot = ctx.type(st.outputs[0])
    src = _operand(ctx, mod, st.inputs[0])
    if _is_scalar(ctx.type(st.inputs[0])):
        raise Ineligible(f"{st.op} of a scalar")
    if tuple(ot[2]) == ():
        ctx.emit(f"{ctx.var(st.outputs[0])} = {src}.reshape(-1)[0]")
    else:
        ctx.emit(f"{ctx.var(st.outputs[0])} = {src}.reshape({tuple(ot[2])!r})")


def _index_map(ctx, st):
    """For each output: the flat index of the (concatenated, flattened) data input element it
    copies, -1 for none; from our own kernel run on element numbers."""
    host = set(kernels.host_inputs(st.op, len(st.inputs)))
    data, offset = {}, 1
    args = []
    for k, s in enumerate(st.inputs):
        t = ctx.type(s)
        if k in host:
            c = ctx.const(s)
            if c is None:
                raise Ineligible(f"{st.op}: host input {k} is not a constant")
            args.append(np.asarray(c))
            continue
        if t[0] != "a":
            raise Ineligible(f"{st.op}: a list input")
        shape = tuple(t[2])
        n = int(np.prod(shape, dtype=np.int64))
        data[k] = (offset, n)
        args.append(np.arange(offset, offset + n, dtype=np.int64).reshape(shape))
        offset += n
    if st.kfn is None:
        raise Ineligible(f"{st.op}: no kernel to compute its index map")
    outs = [np.zeros(tuple(t[2]), np.int64) for t in st.types]
    try:
        st.kfn(args, outs, dict(st.attrs, T=np.dtype(np.int64)))
    except Exception as e:   # noqa: BLE001 - its kernel declines int64 or these attrs
        raise Ineligible(f"{st.op}: index map: {type(e).__name__}: {e}") from None
    return data, [o - 1 for o in outs]


def _emit_movement(ctx, mod, st):
    for t in st.types:
        if t[0] != "a":
            raise Ineligible(f"{st.op}: a list output")
    data, maps = _index_map(ctx, st)
    parts = [f"{_operand(ctx, mod, st.inputs[k])}.reshape(-1)" for k in sorted(data)]
    dt = _dt(st.types[0])
    zero = any((m < 0).any() for m in maps)
    src = ctx.tmp()
    total = sum(n for _, n in data.values())
    if len(parts) == 1 and not zero:
        ctx.emit(f"{src} = {parts[0]}")
    else:   # the data inputs one after another (and a zero for elements no input gives)
        ctx.emit(f"{src} = np.zeros({total + 1 if zero else total}, {_cast(dt)})")
        off = 0
        for k, part in zip(sorted(data), parts):
            ctx.emit(f"put_flat({src}, {off}, {part})")
            off += data[k][1]
    for s, t, m in zip(st.outputs, st.types, maps):
        if zero:
            m = np.where(m < 0, total, m)
        shape = tuple(t[2])
        if shape == ():
            ctx.emit(f"{ctx.var(s)} = {src}[{int(m.reshape(()))}]")
        else:
            o = ctx.var(s)
            ctx.emit(f"{o} = np.empty({shape!r}, {_cast(dt)})")
            flat = m.reshape(-1)
            runs = _runs(flat)
            if runs is None:
                ctx.emit(f"take({src}, {mod.array(flat)}, {o}.reshape(-1))")
            elif runs[1] is not None:   # equally spaced
                off, stride, rows, cols = runs[1]
                ctx.emit(f"take_rows({src}, {off}, {stride}, {rows}, {cols}, {o}.reshape(-1))")
            else:
                ctx.emit(f"take_runs({src}, {mod.array(runs[0])}, {runs[2]}, {o}.reshape(-1))")


RUN_MIN = 8   # shorter runs are gathered one element at a time


def _runs(m):
    """The flat index map `m` as runs of `cols` consecutive indices: (starts, (offset, stride,
    rows, cols) where the starts are equally spaced else None, cols); None where the runs are
    shorter than RUN_MIN or of unequal length."""
    n = m.size
    breaks = np.flatnonzero(np.diff(m) != 1)
    cols = int(breaks[0]) + 1 if breaks.size else n
    if cols < RUN_MIN or n % cols:
        return None
    rows = n // cols
    starts = m[::cols].astype(np.int64)
    if not np.array_equal(m.reshape(rows, cols), starts[:, None] + np.arange(cols)):
        return None
    step = np.diff(starts)
    even = rows == 1 or (step == step[0]).all() and step[0] >= 0
    stride = int(step[0]) if rows > 1 else cols
    return starts, ((int(starts[0]), stride, rows, cols) if even else None), cols


def _emit_reduce(ctx, mod, st):
    x = st.inputs[0]
    shape = tuple(ctx.type(x)[2])
    nd = len(shape)
    if st.op == "BiasAddGrad":
        if st.attrs.get("data_format", "NHWC") not in ("NHWC", b"NHWC"):
            raise Ineligible("BiasAddGrad: NCHW")
        axes = list(range(nd - 1))
    else:
        c = ctx.const(st.inputs[1])
        if c is None:
            raise Ineligible(f"{st.op}: axes not constant")
        axes = sorted({int(a) % max(nd, 1) for a in np.asarray(c).reshape(-1)})
    dt = _dt(ctx.type(st.outputs[0]))
    if dt.name not in FLOATS or nd == 0:
        raise Ineligible(f"{st.op} on {dt.name} rank {nd}")
    ot = ctx.type(st.outputs[0])
    k = len(axes)
    if axes == list(range(k)):
        lead = True
    elif axes == list(range(nd - k, nd)):
        lead = False
    else:
        raise Ineligible(f"{st.op}: axes {axes} of rank {nd}")
    red = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    keep = int(np.prod(shape, dtype=np.int64)) // max(red, 1)
    o = ctx.var(st.outputs[0])
    src = _operand(ctx, mod, x)
    fn = "rsum_lead" if lead else "rsum_trail"
    mean = "True" if st.op == "Mean" else "False"
    ctx.emit(f"{o} = {fn}({src}.reshape(({red if lead else keep}, {keep if lead else red})), "
             f"{mean})")
    ctx.emit(f"{o} = {o}.reshape(-1)[0]" if tuple(ot[2]) == () else
             f"{o} = {o}.reshape({tuple(ot[2])!r})")


# ---- lists ------------------------------------------------------------------------------------

def _list_names(ctx, slot):
    v = ctx.var(slot)
    return v, f"{v}n"


def _rows(t):
    """A list split by rows (loop_split.halved): its buffer is [capacity, 2, *half item] and
    this half's items are buffer[i, p]."""
    return len(t) > 3 and t[3] == "rows"


def _emit_list(ctx, mod, st):
    op = st.op
    if op == "TensorListGetItem":
        buf, n = _list_names(ctx, st.inputs[0])
        i = _operand(ctx, mod, st.inputs[1])
        copy = ".copy()" if ctx.written(st.inputs[0]) else ""
        o = ctx.var(st.outputs[0])
        half = ", p" if _rows(ctx.type(st.inputs[0])) else ""
        ctx.emit(f"if {i} < 0 or {i} >= {n}:", "    raise IndexError('TensorListGetItem')")
        if _is_scalar(st.types[0]):
            ctx.emit(f"{o} = {buf}[{i}]")
        else:
            ctx.emit(f"{o} = {buf}[{i}{half}]{copy}")
    elif op == "TensorListSetItem":
        if st.attrs.get("resize_if_index_out_of_bounds"):
            raise Ineligible("TensorListSetItem with resize_if_index_out_of_bounds")
        buf, n = _list_names(ctx, st.inputs[0])
        ob, on = _list_names(ctx, st.outputs[0])
        i = _operand(ctx, mod, st.inputs[1])
        item = _operand(ctx, mod, st.inputs[2])
        ctx.emit(f"if {i} < 0 or {i} >= {n}:", "    raise IndexError('TensorListSetItem')")
        ctx.emit(f"{ob} = {buf}" + ("" if ctx.last_use(st, st.inputs[0]) else ".copy()"),
                 f"{on} = {n}", _put(ob, i, item, st.types[0], ctx, st.inputs[2]))
    elif op == "TensorListPushBack":
        buf, n = _list_names(ctx, st.inputs[0])
        ob, on = _list_names(ctx, st.outputs[0])
        item = _operand(ctx, mod, st.inputs[1])
        own = ctx.last_use(st, st.inputs[0]) or not ctx.rewritten(st.inputs[0], st)
        ctx.emit(f"{ob} = grow({buf}, {n})" + ("" if own else ".copy()"),
                 _put(ob, n, item, st.types[0], ctx, st.inputs[1]), f"{on} = {n} + 1")
    elif op == "TensorListPopBack":
        buf, n = _list_names(ctx, st.inputs[0])
        ob, on = _list_names(ctx, st.outputs[0])
        o = ctx.var(st.outputs[1])
        copy = "" if _is_scalar(st.types[1]) or not ctx.written(st.inputs[0]) else ".copy()"
        half = ", p" if _rows(ctx.type(st.inputs[0])) else ""
        ctx.emit(f"if {n} <= 0:", "    raise IndexError('TensorListPopBack')",
                 f"{o} = {buf}[{n} - 1{half}]{copy}", f"{ob} = {buf}", f"{on} = {n} - 1")
    elif op == "TensorListReserve":
        ob, on = _list_names(ctx, st.outputs[0])
        t = st.types[0]
        n = _operand(ctx, mod, st.inputs[1])
        lead = f"({n}, 2)" if _rows(t) else f"({n},)"
        ctx.emit(f"if {n} < 0:", "    raise IndexError('TensorListReserve')",
                 f"{ob} = np.zeros({lead} + {tuple(t[2])!r}, {_cast(t[1])})", f"{on} = {n}")
    elif op == "TensorListLength":
        _, n = _list_names(ctx, st.inputs[0])
        ctx.emit(f"{ctx.var(st.outputs[0])} = np.int32({n})")
    elif _rows(ctx.type(st.inputs[0])) and op == "TensorListStack":
        raise Ineligible(f"{op} of a list split by rows")
    elif op == "TensorListElementShape":
        t = ctx.type(st.inputs[0])
        dt = st.attrs.get("shape_type", np.dtype(np.int32))
        shape = list(t[2])
        if _rows(t):   # the whole list's element
            shape[0] *= 2
        ctx.emit(f"{ctx.var(st.outputs[0])} = "
                 f"{mod.array(np.array(shape, dt).reshape(tuple(st.types[0][2])))}")
    elif op == "TensorListStack":
        buf, n = _list_names(ctx, st.inputs[0])
        want = st.attrs.get("num_elements", -1)
        if want not in (-1, None):
            ctx.emit(f"if {n} != {int(want)}:", "    raise IndexError('TensorListStack')")
        ctx.emit(f"{ctx.var(st.outputs[0])} = {buf}[:{n}].copy()")
    else:
        raise Ineligible(f"{op}: no inline form")


def _put(buf, i, item, list_type, ctx, item_slot):
    """buf[i] = item: a scalar stored as it is, an array through a helper (numba lowers an
    array assignment into a slice at every site: compile time)."""
    if _rows(list_type):
        return f"put_rows({buf}, {i}, p, {item}, False)"
    guard = "if p == 0: " if len(list_type) > 3 and list_type[3] == "first" else ""
    if _is_scalar(ctx.type(item_slot)):
        return f"{guard}{buf}[{i}] = {item}"
    return f"{guard}put_item({buf}, {i}, {item}, False)"


def _emit_list_addn(ctx, mod, st):
    """AddN over lists. acc + SetItem(Reserve(...), i, v) (the gradient of one read item, each
    iteration) is acc[i] += v in place; any other form adds the buffers item by item."""
    rows = any(_rows(ctx.type(s)) for s in st.inputs + st.outputs)
    ob, on = _list_names(ctx, st.outputs[0])
    pat = ctx.set_into_reserve(st)
    if pat is not None:
        acc, i, v = pat
        i, v = _operand(ctx, mod, i), _operand(ctx, mod, v)
        buf, n = _list_names(ctx, acc)
        put = (f"put_rows({ob}, {i}, p, {v}, True)" if rows else
               f"put_item({ob}, {i}, {v}, True)" if not _is_scalar(ctx.type(pat[2])) else
               f"{ob}[{i}] += {v}")
        ctx.emit(f"if {i} < 0 or {i} >= {n}:", "    raise IndexError('AddN')",
                 f"{ob} = {buf}" + ("" if ctx.last_use(st, acc) else ".copy()"),
                 f"{on} = {n}", put)
        return
    if rows:
        raise Ineligible("AddN of lists split by rows")
    first = _list_names(ctx, st.inputs[0])
    ctx.emit(f"{ob} = {first[0]}[:{first[1]}].copy()", f"{on} = {first[1]}")
    for s in st.inputs[1:]:
        b, n = _list_names(ctx, s)
        ctx.emit(f"if {n} != {on}:", "    raise IndexError('AddN')", f"{ob} += {b}[:{n}]")


def _nhwc(st):
    fmt = st.attrs.get("data_format", "NHWC")
    if fmt not in ("NHWC", b"NHWC"):
        raise Ineligible(f"{st.op}: {fmt!r}")


def _emit_conv2d(ctx, mod, st):
    """Conv2D as our kernel computes it where Winograd does not apply: the patches (conv_ops'
    im2col) and one product through sgemm/dgemm. With padding, a non-finite first output pixel
    raises, and the nodes run one by one (our kernel decides, as for any call, whether
    TensorFlow's runs it: oneDNN skips padded taps, a product with them turns Inf into NaN)."""
    from kernels.cpu import conv_ops, winograd
    x, f = st.inputs
    tx, tw, to = ctx.type(x), ctx.type(f), ctx.type(st.outputs[0])
    dt = _dt(to)
    if dt.name not in FLOATS or _dt(tx) != dt or _dt(tw) != dt:
        raise Ineligible(f"Conv2D on {dt.name}")
    _nhwc(st)
    if not gemm.available():
        raise Ineligible("Conv2D: numpy's OpenBLAS symbols are not available")
    try:
        _, xs, g = conv_ops._geometry(tuple(tx[2]), tuple(tw[2]), st.attrs, "Conv2D", dt)
    except Exception as e:   # the nodes raise it
        raise Ineligible(f"Conv2D: {type(e).__name__}") from None
    N, H, W, C = xs
    KH, KW, _, CO = tw[2]
    M, K = N * g.oh * g.ow, KH * KW * C
    if not (M and K and CO):
        raise Ineligible("Conv2D: empty")
    if dt == np.float32 and winograd.applies_to(N, tw[2], g):
        raise Ineligible("Conv2D: Winograd's sizes")
    cols, o = ctx.tmp(), ctx.var(st.outputs[0])
    im2col = mod.extern(conv_ops._runs_s if g.dw == 1 else conv_ops._im2col_s,
                        "_runs_s" if g.dw == 1 else "_im2col_s")
    ctx.emit(f"{cols} = np.empty(({M}, {K}), {_cast(dt)})",
             f"{im2col}({_operand(ctx, mod, x)}, {cols}.reshape(({M}, {KH * KW}, {C})), 0, "
             f"{N * g.oh}, {g.oh}, {g.ow}, {KH}, {KW}, {g.sh}, {g.sw}, {g.dh}, {g.dw}, {g.pt}, "
             f"{g.pl})",
             f"{o} = np.empty({(N, g.oh, g.ow, CO)!r}, {_cast(dt)})",
             f"mm{dt.itemsize * 8}({cols}, {_operand(ctx, mod, f)}.reshape(({K}, {CO})), "
             f"{o}.reshape(({M}, {CO})), False, False)")
    if g.pt or g.pb or g.pl or g.pr:
        ctx.emit(f"if not np.isfinite({o}.reshape(({M}, {CO}))[0]).all():",
                 "    raise ValueError('Conv2D: a non-finite result with padding')")


def _emit_pool(ctx, mod, st):
    """MaxPool / AvgPool by our kernels' own (serial) loops."""
    from kernels.cpu import pooling_ops
    x = st.inputs[0]
    tx, to = ctx.type(x), ctx.type(st.outputs[0])
    dt = _dt(to)
    if dt.name not in FLOATS or _dt(tx) != dt:
        raise Ineligible(f"{st.op} on {dt.name}")
    _nhwc(st)
    try:
        _, g = pooling_ops._window(tuple(tx[2]), st.attrs, st.op, dt)
    except Exception as e:
        raise Ineligible(f"{st.op}: {type(e).__name__}") from None
    if not int(np.prod(to[2], dtype=np.int64)):
        raise Ineligible(f"{st.op}: empty")
    name = "max_pool_s" if st.op == "MaxPool" else "avg_pool_s"
    fn = mod.extern(getattr(pooling_ops, name), name)
    extra = f", {_literal(np.finfo(dt).min, dt)}" if st.op == "MaxPool" else ""
    o = ctx.var(st.outputs[0])
    ctx.emit(f"{o} = np.empty({tuple(to[2])!r}, {_cast(dt)})",
             f"{fn}({_operand(ctx, mod, x)}, {o}, {g.kh}, {g.kw}, {g.sh}, {g.sw}, {g.pt}, "
             f"{g.pl}{extra})")


EMIT = {"MatMul": _emit_matmul, "AddN": _emit_addn, "SelectV2": _emit_select,
        "Conv2D": _emit_conv2d, "MaxPool": _emit_pool, "AvgPool": _emit_pool}
EMIT.update({op: _emit_view for op in VIEWS})
EMIT.update({op: _emit_movement for op in MOVEMENT})
EMIT.update({op: _emit_reduce for op in REDUCE})
EMIT.update({op: _emit_list for op in LIST_OPS})


def _emit_step(ctx, mod, st):
    if st.kind == "fused":
        return _emit_fused(ctx, mod, st)
    if st.kind == "alias":
        for s, o in zip(st.inputs, st.outputs):
            ctx.emit(f"{ctx.var(o)} = {ctx.var(s)}")
            if ctx.type(s)[0] == "l":
                ctx.emit(f"{ctx.var(o)}n = {ctx.var(s)}n")
        return
    if st.kind == "noop":
        return
    if st.kind == "pair":
        return _emit_pair(ctx, mod, st)
    f = EMIT.get(st.op)
    if f is not None:
        return f(ctx, mod, st)
    if st.op in TABLE:
        return _emit_table(ctx, mod, st)
    raise Ineligible(f"{st.op}: no inline form")


# ---- the function -----------------------------------------------------------------------------

class _RegionCtx(_Ctx):
    """Adds what list ops need to know about the region: later readers, writers of a buffer."""

    def __init__(self, prefix, region):
        super().__init__(prefix, region)
        self.order = {id(s): k for k, s in enumerate(region.steps)}
        self.readers = {}
        for k, s in enumerate(region.steps):
            for x in s.inputs:
                self.readers.setdefault(x, []).append(k)
        self.outs = set(region.outputs)
        self.producer = {o: s for s in region.steps for o in s.outputs}
        # list slots whose buffer some step writes: items read from them must be copies
        self._written = _written_webs(region)
        # Reserve + SetItem steps whose list only an AddN reads: acc[i] += v does their work
        self.absorbed = set()
        for st in region.steps:
            if st.op == "AddN" and region.types.get(st.outputs[0], ("a",))[0] == "l":
                pat = self.set_into_reserve(st)
                if pat is not None:
                    for x in st.inputs:
                        p = self.producer.get(x)
                        if p is not None and p.op == "TensorListSetItem":
                            self.absorbed.update((id(p), id(self.producer[p.inputs[0]])))

    def last_use(self, st, slot):
        """No step after `st` reads slot, and it is no output of the region."""
        k = self.order[id(st)]
        return slot not in self.outs and all(r <= k for r in self.readers.get(slot, ()))

    def rewritten(self, slot, st):
        """Another step writing a list derived from the same slot (PushBack on the same list
        twice would write one buffer position twice)."""
        return any(self.r.steps[r] is not st and self.r.steps[r].op in _WRITERS
                   for r in self.readers.get(slot, ()))

    def written(self, slot):
        return slot in self._written

    def set_into_reserve(self, st):
        """(acc slot, index name, item name) when st is AddN(acc, SetItem(Reserve, i, v)) with
        the SetItem's and the Reserve's lists read by nothing else."""
        if len(st.inputs) != 2:
            return None
        for a, b in ((0, 1), (1, 0)):
            p = self.producer.get(st.inputs[b])
            if p is None or p.op != "TensorListSetItem" or len(self.readers.get(st.inputs[b],
                                                                              ())) != 1:
                continue
            r = self.producer.get(p.inputs[0])
            if r is None or r.op != "TensorListReserve" or len(self.readers.get(
                    p.inputs[0], ())) != 1 or st.inputs[b] in self.outs:
                continue
            if self.type(st.inputs[a])[0] != "l":
                continue
            return st.inputs[a], p.inputs[1], p.inputs[2]
        return None


_WRITERS = {"TensorListSetItem", "TensorListPushBack", "AddN"}


def _written_webs(region):
    """List slots sharing a buffer with one that a step writes into."""
    webs = Webs()
    find = webs.find
    writes = set()
    for s in region.steps:
        if s.op in LIST_OPS or (s.op in ("AddN",) and region.types.get(s.outputs[0],
                                                                         ("a",))[0] == "l"):
            lists_in = [x for x in s.inputs if region.types.get(x, ("a",))[0] == "l"]
            lists_out = [x for x in s.outputs if region.types.get(x, ("a",))[0] == "l"]
            for x in lists_in + lists_out:
                webs.union(x, (lists_in + lists_out)[0])
            if s.op in _WRITERS:
                writes.update(lists_out)
        elif s.kind == "alias":
            for x, o in zip(s.inputs, s.outputs):
                webs.union(o, x)
    roots = {find(x) for x in writes}
    # a loop variable's buffer is written in a later iteration too: every web it joins
    out = {x for x in list(webs.parent) if find(x) in roots}
    return out


_EARLY = {"TensorListGetItem", "TensorListPopBack", "TensorListLength",
          "TensorListElementShape", "TensorListStack"}


def _reads_early(region):
    """List reads (GetItem, PopBack, Length, ElementShape, Stack) moved up to just after their
    inputs are made: values are immutable, so reading earlier reads the same value. A read then
    runs before any SetItem/PushBack that makes a new list from the one it reads, so that writer
    owns the buffer and writes in place instead of copying the list (while_v2's gradient of a
    SetItem zeroes the item after reading it: a 40x64x64 list copied every iteration); and a
    product's operands are in place for pairing (the gradient bodies pop each operand right
    before its product)."""
    out = []
    for st in region.steps:
        if st.op in _EARLY and st.kind == "list":
            j = len(out)
            while j > 0 and not any(o in st.inputs for o in out[j - 1].outputs):
                j -= 1
            out.insert(j, st)
        else:
            out.append(st)
    return out


def _product(st):
    """(a, b, transpose_a, transpose_b) of a step that is a product or a product with its
    epilogue, else None."""
    if st.kind == "kernel" and st.op == "MatMul":
        a, b = st.inputs
        m = st
    elif st.kind == "fused" and st.parts is not None and st.parts[0].op == "MatMul":
        m = st.parts[0]
        a, b = st.inputs[:2]
    else:
        return None
    return a, b, bool(m.attrs.get("transpose_a")), bool(m.attrs.get("transpose_b"))


def _pair_products(region):
    """Independent products run in pairs, one per core (kernels/cpu/loop_helpers.mm2_*): the
    later one joins the earlier where its operands are already made. A paired product with an
    epilogue keeps the epilogue at its own place, reading the product's slot."""
    steps = region.steps
    made_at = {}
    for k, st in enumerate(steps):
        for o in st.outputs:
            made_at[o] = k
    partner = {}
    prods = [k for k, st in enumerate(steps) if _product(st) is not None
             and _dt(st.types[0]).name in FLOATS]
    for i, k1 in enumerate(prods):
        if k1 in partner:
            continue
        for k2 in prods[i + 1:]:
            if k2 in partner or _dt(steps[k2].types[0]) != _dt(steps[k1].types[0]):
                continue
            a, b = _product(steps[k2])[:2]
            if all(made_at.get(x, -1) < k1 for x in (a, b)):
                partner[k1], partner[k2] = k2, k1
                break
    if not partner:
        return steps
    out = []
    temp = {}
    for k, st in enumerate(steps):
        if k not in partner:
            out.append(st)
            continue
        if partner[k] > k:   # the pair's place: both products
            k2 = partner[k]
            outs, types, args = [], [], []
            for kk in (k, k2):
                s2 = steps[kk]
                a, b, ta, tb = _product(s2)
                slot = s2.outputs[0] if s2.parts is None else f"pp{kk}"
                region.types[slot] = s2.types[0]
                temp[kk] = slot
                outs.append(slot)
                types.append(s2.types[0])
                args.append((ta, tb))
            ins = list(_product(st)[:2]) + list(_product(steps[k2])[:2])
            out.append(Step("MatMul2", "pair", {}, ins, outs, types, parts=tuple(args)))
        if st.parts is not None:   # the epilogue, at the step's own place
            m, n, i = st.parts
            rest = list(st.inputs[len(m.inputs):])
            rest.insert(i, temp[k])
            out.append(Step(n.op, n.kind, n.attrs, rest, st.outputs, st.types,
                            fusion=n.fusion))
    return out


def _emit_pair(ctx, mod, st):
    dt = _dt(st.types[0])
    names = [_operand(ctx, mod, x) for x in st.inputs]
    (ta1, tb1), (ta2, tb2) = st.parts
    o1, o2 = (ctx.var(o) for o in st.outputs)
    ctx.emit(f"{o1} = np.empty({tuple(st.types[0][2])!r}, {_cast(dt)})",
             f"{o2} = np.empty({tuple(st.types[1][2])!r}, {_cast(dt)})",
             f"mm2_{dt.itemsize * 8}({names[0]}, {names[1]}, {o1}, {ta1}, {tb1}, "
             f"{names[2]}, {names[3]}, {o2}, {ta2}, {tb2})")


def _region_source(prefix, region, mod, lines, pad, names, pair=True):
    region.steps = _reads_early(region)
    if pair:
        region.steps = _pair_products(region)
    ctx = _RegionCtx(prefix, region)
    ctx.names = names
    for st in region.steps:
        if any(isinstance(s, int) and s in region.pre for s in st.outputs):
            continue   # computed before the loop (an argument)
        if id(st) in ctx.absorbed:
            continue   # folded into a list AddN (acc[i] += v)
        _emit_step(ctx, mod, st)
    lines.extend(pad + l for l in ctx.lines)
    return ctx


def _check_types(loop):
    for t in loop.vars:
        if t[0] == "a" and (any(d is None for d in t[2]) or np.dtype(t[1]).kind not in "fiub"):
            raise Ineligible(f"a loop variable of type {t}")
        if t[0] == "l" and (t[2] is None or any(d is None for d in t[2])):
            raise Ineligible("a list whose element shape is not static")
    for region in (loop.cond, loop.body):
        for s, t in region.types.items():
            if t[0] == "a" and (t[2] is None or any(d is None for d in t[2])):
                raise Ineligible(f"slot %{s}: no static shape")


def source(loop, pair=True, note="", rows=False):
    """(python source of `loop_fn(vars..., pre..., constant arrays...)`, constant arrays,
    whether each loop variable's list is written). The function returns the loop variables after the loop (lists as buffer and length) and the number of
    body runs. `pair`: independent products two at a time (mm2_*; not in a half of a loop
    split by rows, which runs on a core of its own); `note`: a comment line for the file;
    `rows`: a half of a loop split by rows, `loop_fn(p, ...)` (p: which half)."""
    _check_types(loop)
    mod = _Module()
    body = []
    args = []
    names = []
    for k, t in enumerate(loop.vars):
        if t[0] == "l":
            names += [f"v{k}", f"v{k}n"]
        elif t[0] == "a":
            names.append(f"v{k}")
    args += (["p"] if rows else []) + names
    pre = [f"q{j}" for j in range(len(loop.body.pre))]
    args += pre

    def inputs(region):
        """The region reads its inputs by the loop variables' own names (no copies: each
        array assignment is a reference count pair for numba and LLVM to work through)."""
        return {s: f"v{k}" for k, s in enumerate(region.inputs) if loop.vars[k][0] != "h"}

    lines = ["    it = 0"]
    if HW_FLUSH:   # TensorFlow's threads flush subnormals: FTZ/DAZ for the loop's duration
        lines += ["    csr = fp_env_get()", "    fp_env_set(csr | FTZ_DAZ)"]
    lines += ["    while True:"]
    cctx = _region_source("c", loop.cond, mod, lines, "        ", inputs(loop.cond), pair)
    lines += [f"        if not {cctx.var(loop.cond.outputs[0])}:", "            break"]
    bnames = inputs(loop.body)
    bnames.update({s: f"q{j}" for j, s in enumerate(loop.body.pre)})
    bctx = _region_source("b", loop.body, mod, lines, "        ", bnames, pair)
    # lists the body writes into: the caller hands the loop its own copy of their buffers
    copy_in = [t[0] == "l" and bctx.written(loop.body.inputs[k]) for k, t in enumerate(loop.vars)]
    news = []
    for k, s in enumerate(loop.body.outputs):
        t = loop.vars[k]
        if t[0] == "h":
            if s != loop.body.inputs[k]:
                raise Ineligible("a handle the body does not pass through")
            continue
        c = loop.body.consts.get(s)
        src = _literal(c, t[1]) if c is not None and t[0] == "a" and tuple(t[2]) == () else (
            mod.array(np.asarray(c, t[1])) if c is not None else bctx.var(s))
        if src == f"v{k}":
            continue   # passed through as it is
        if t[0] == "a" and tuple(t[2]) == ():
            src = f"{_cast(t[1])}({src})"
        news.append((f"v{k}", src))
        if t[0] == "l":
            news.append((f"v{k}n", f"{bctx.var(s)}n"))
    if news:
        lines.append(f"        {', '.join(n for n, _ in news)} = {', '.join(s for _, s in news)}")
    lines.append("        it += 1")
    if HW_FLUSH:
        lines.append("    fp_env_set(csr)")
    lines.append(f"    return ({', '.join(names + ['it'])},)")
    return _module(mod, args, lines, note), mod.arrays, copy_in


def _module(mod, args, lines, note=""):
    """The generated module: imports, the scalar functions, `loop_fn(args..., K...)`."""
    consts = [f"K{j}" for j in range(len(mod.arrays))]
    head = ('"""Generated by kernels/cpu/loops.py; do not edit."""\n'
            f"# helpers {_HELPERS}\n" + (f"# {note}\n" if note else "") +
            "import math\nimport numpy as np\nfrom numba import njit\n"
            "from kernels.cpu.scalar import *  # noqa\n"
            "from kernels.cpu.loop_helpers import (mm32, mm64, mm2_32, mm2_64, grow, rsum_lead,\n"
            "                                      rsum_trail, take, take_rows, take_runs,\n"
            "                                      put_flat, put_item, put_rows)\n"
            + "".join(f"from {m} import {n} as {a}\n" for a, (m, n) in mod.ext.items())
            + "\n\n"
            + "\n".join(mod.fns.values()) + "\n\n"
            "@njit(cache=True, nogil=True, error_model='numpy')\n"
            f"def loop_fn({', '.join(args + consts)}):\n")
    return head + "\n".join(lines) + "\n"


def region_source(region):
    """(source of `loop_fn(inputs..., K...)` returning the region's outputs, constant arrays)
    for a straight-line Region of small nodes (passes/compile_regions.py): one call instead
    of one Python call per node. Raises Ineligible."""
    for s, t in region.types.items():
        if t[0] != "a" or t[2] is None or any(d is None for d in t[2]):
            raise Ineligible(f"slot %{s}: not an array of static shape")
    mod = _Module()
    lines = []
    if HW_FLUSH:
        lines += ["    csr = fp_env_get()", "    fp_env_set(csr | FTZ_DAZ)"]
    names = {s: f"a{k}" for k, s in enumerate(region.inputs)}
    ctx = _region_source("r", region, mod, lines, "    ", names)
    if HW_FLUSH:
        lines.append("    fp_env_set(csr)")
    lines.append(f"    return ({''.join(ctx.var(s) + ', ' for s in region.outputs)})")
    return _module(mod, list(names.values()), lines), mod.arrays


def build_region(region):
    """(the function, its constant arrays, None, the source), as build() returns for a loop
    (a region has no lists to copy in); raises Ineligible."""
    if not gemm.available():
        raise Ineligible("numpy's OpenBLAS symbols are not available")
    _threads_ready()
    src, arrays = region_source(region)
    digest = hashlib.sha1((src + ew.GEN.__name__).encode()).hexdigest()[:16]
    m = ew.import_generated(src, f"region_cpu_{digest}.py", f"_tf_backend_region_{digest}")
    return m.loop_fn, arrays, None, src


def _threads_ready():
    """Start numba's threading layer: a loop function loaded from the cache calls its parallel
    helpers (mm2_*) from compiled code, which does not start the layer the way a call from
    Python does; in a process where nothing parallel had run yet that call crashed."""
    from numba.np.ufunc import parallel
    parallel._launch_threads()


def _helpers_digest():
    """numba's cache keys a function by its own bytecode, not its callees': a loop function
    cached against an older loop_helpers.py would call that version's machine code (a stale
    callee ABI crashed). The generated source names the helpers' version, so a change there
    is a new file and a new cache entry."""
    import inspect
    from kernels.cpu import loop_helpers
    src = inspect.getsource(loop_helpers) + inspect.getsource(gemm)
    return hashlib.sha1(src.encode()).hexdigest()[:12]


_HELPERS = _helpers_digest()


# one child at a time per kind: loops do not wait behind a program's many regions
_child_locks = {"loop": __import__("threading").Lock(), "region": __import__("threading").Lock()}


def cached(fn, sig):
    """Whether numba's disk cache holds `fn` for `sig` (then compile() only loads it).

    Under numba's compiler lock, as its own compile() loads: loading refreshes the target
    context, which advances registry generators shared by every thread; unlocked, this
    (in the background compile thread) raced the main thread's first call of a fused loop,
    which failed the node with "ValueError: generator already executing" (seen once in the
    background-compile test)."""
    from numba.core.compiler_lock import global_compiler_lock
    try:
        with global_compiler_lock:
            return fn._cache.load_overload(sig, fn.targetctx) is not None
    except Exception:  # noqa: BLE001 - numba internals moved: say no, a child compiles it
        return False


def compile_elsewhere(fn, sig, timeout=600, kind="loop"):
    """Compile `fn` (a build() function) for `sig` in a child process (loop_compile.py), one
    child at a time, then load it here from numba's cache. Returns False when the child
    failed (the caller compiles in this process)."""
    if cached(fn, sig):   # an earlier process compiled it: no waiting behind another child
        fn.compile(sig)
        return True
    with _child_locks[kind]:
        if cached(fn, sig):   # the child before this one compiled it
            fn.compile(sig)
            return True
        return _child(fn, sig, timeout)


def _lowest_priority():
    try:
        os.nice(19)
    except OSError:
        pass


def _child(fn, sig, timeout):
    import pickle
    import subprocess
    import sys
    import tempfile
    mod = sys.modules[fn.py_func.__module__]
    fused = []
    for name in sorted(vars(mod)):
        v = getattr(mod, name)
        owner = getattr(getattr(v, "py_func", None), "__module__", "")
        if owner.startswith("_tf_backend_fused_"):
            fm = sys.modules[owner]
            fused.append((fm.__file__, owner))
    fd, path = tempfile.mkstemp(suffix=".loop.pkl")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump((mod.__file__, mod.__name__, sorted(set(fused)), sig), f)
        # at the lowest priority: it takes the cores' idle time, not the steps' (at equal
        # priority the interpreted steps beside it ran 2-3x slower on 2 cores: numba's team
        # waiting on a thread the compile had displaced)
        r = subprocess.run([sys.executable, "-m", "kernels.cpu.loop_compile", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout,
                           preexec_fn=_lowest_priority,
                           cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                               os.path.abspath(__file__)))))
    except (OSError, subprocess.SubprocessError, pickle.PicklingError):
        return False
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if r.returncode != 0:
        return False
    fn.compile(sig)   # from numba's cache, written by the child
    return True


def build(loop):
    """(the function, its constant arrays, per loop variable whether the loop writes the list
    it is given, the source); raises Ineligible. numba compiles on the first call."""
    if not gemm.available():
        raise Ineligible("numpy's OpenBLAS symbols are not available")
    _threads_ready()
    sp = None
    if SPLIT_ROWS:
        try:
            sp = loop_split.plan(loop, _index_map)
            if sp is not None:
                B, split, _ = sp
                half = loop_split.halved(loop, sp)
                src, arrays, copy_in = source(
                    half, pair=False, rows=True,
                    note=f"split by rows: two halves of {B // 2} of {B}")
        except Exception:  # noqa: BLE001 - a split it cannot write: the loop runs whole
            sp = None
    if sp is None:
        src, arrays, copy_in = source(loop)
    digest = hashlib.sha1((src + ew.GEN.__name__).encode()).hexdigest()[:16]
    m = ew.import_generated(src, f"loop_cpu_{digest}.py", f"_tf_backend_loop_{digest}")
    if sp is None:
        return m.loop_fn, arrays, copy_in, src
    return (loop_split.Rows(m.loop_fn, loop.vars, split, B, copy_in, half.vars), arrays, copy_in,
            src)


# TF_BACKEND_LOOP_ROWS=0: loops run whole (A/B runs)
SPLIT_ROWS = os.environ.get("TF_BACKEND_LOOP_ROWS", "1") != "0"
