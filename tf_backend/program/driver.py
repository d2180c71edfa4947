"""Generated drivers: a program's serial run as one straight-line Python function.

The interpreter (executor.step) decides per node and per call what a node is: its kind, whether
its inputs failed, whether it is a view, runs in place or in shadow mode, how its outputs are
allocated. All of that is known once the passes are done, so each program gets a function that
does only what its nodes need: kernels bound as constants, static output shapes as literals,
drops after last use as plain stores. A plain TensorFlow node (one op, a batched variable read)
is one call into TensorFlow from the top of a chunk of its own (TensorFlow's stack capture on
every eager op is cheaper the fewer and shorter the frames it scans); other kinds with
TensorFlow or control flow inside (memo, if, case, while, XLA calls, kernel-state ops) call the
interpreter's step for that node.

Errors stay values: a node that raises returns (node index, exception) to the caller, which
records it and continues with the interpreter from the next node (dependents are skipped there,
independent nodes still run), so a failure behaves exactly as in the interpreter. A kernel that
declines its inputs (Unsupported) runs on TensorFlow for this call, as in the interpreter.
Tracing and shadow mode use the interpreter; the plain path pays nothing for them.
"""
import functools
import math

import numpy as np

import kernels
from shape_fns import Unsupported

from ..devices.cpu import BUFFER, writable_expr
from ..runtime.lists import HostList

def _arr(name):
    return f"({name} if type({name}) is ND else AS({name}))"


def _internal(prog):
    """Slots only our own nodes read (no program output, no TensorFlow node): their buffers need
    no alignment for a zero-copy hand-off to TensorFlow."""
    ours = {"kernel", "fused", "list", "alias", "noop"}
    out = set(range(prog.n_slots)) - set(prog.outputs)
    for n in prog.nodes:
        if n.kind not in ours:
            out.difference_update(n.inputs)
    return out


def source(prog, view, view_ops, small_bytes=0, plain_below=0, direct=None, out_shapes=None):
    """(python source of `drive(vals, failed)`, constants it binds by name). Outputs under
    `small_bytes`, and those under `plain_below` that only our nodes read, are plain np.empty
    (aligned allocation is for buffers TensorFlow takes without a copy). `direct(node)`:
    "stock" or "reads" for a TensorFlow node the driver runs itself (XS: one op on TensorFlow's
    kernel, RV: a batched variable read), None for the interpreter's step. `out_shapes(shape_fn,
    arrays, attrs)`: output buffers of a kernel whose shapes are known only at run time
    (without it such nodes take the interpreter's step)."""
    env = {}
    blocks = []   # per node: its lines in the driver
    drops = prog.drops
    internal = _internal(prog)

    def plain(slot, spec):
        nbytes = spec.dtype.itemsize * math.prod(spec.shape)
        return nbytes < small_bytes or (slot in internal and nbytes < plain_below)

    def bind(value, prefix, i):
        name = f"{prefix}{i}"
        env[name] = value
        return name

    for n in prog.nodes:
        i = n.id
        body = []
        ins = [f"i{i}_{k}" for k in range(len(n.inputs))]
        reads = [f"{v} = vals[{s}]" for v, s in zip(ins, n.inputs)]
        outs = n.outputs
        kind = n.kind
        run_tf = direct(n) if direct is not None and kind in ("stock", "reads") else None
        if kind == "noop":
            pass
        elif kind == "alias":
            body += [f"vals[{o}] = vals[{s}]" for o, s in zip(outs, n.inputs)]
        elif kind == "kernel" and n.op in view_ops:
            arrays = "[" + ", ".join(_arr(v) for v in ins) + "]"
            view_n = bind(functools.partial(view, n), "VIEW", i)
            if len(outs) == 1:
                body += reads + [f"vals[{outs[0]}] = {view_n}({arrays})[0]"]
            else:
                body += reads + [f"o = {view_n}({arrays})"]
                body += [f"vals[{s}] = o[{k}]" for k, s in enumerate(outs)]
        elif kind in ("kernel", "fused") and (out_shapes is not None or (
                n.out_specs is not None and all(s.fully_defined for s in n.out_specs))):
            fn = bind(n.fn if kind == "fused" else kernels.specialized(
                n.kdef, n.attrs, [prog.slot_specs.get(s) for s in n.inputs], n.out_specs),
                "F", i)
            arrays = "[" + ", ".join(_arr(v) for v in ins) + "]"
            body += reads + [f"a = {arrays}"]
            attrs = bind(n.attrs, "A", i)
            if n.out_specs is not None and all(s.fully_defined for s in n.out_specs):
                allocs = [f"{'NPEMPTY' if plain(o, s) else 'EMPTY'}"
                          f"({tuple(s.shape)!r}, {bind(s.dtype, 'DT', f'{i}_{k}')})"
                          for k, (o, s) in enumerate(zip(outs, n.out_specs))]
                make = f"[{', '.join(allocs)}]"
            else:   # shapes known only at run time (a Keras fit step's batch): its shape fn
                allocs = []   # (a fused node sizes its own output)
                make = f"RUNK({bind(n.shape_fn, 'SF', i)}, a, {attrs})"
            if kind == "fused":
                call = f"o = {fn}(a, {bind(n.out_specs, 'SP', i)}, out={{}})"
                if n.inplace is not None:
                    b = ins[n.inplace]
                    body += [f"b = {b} if {writable_expr(b)} else None",
                             call.format("b")]
                elif len(allocs) == 1:   # a fresh buffer of the loop's own shape
                    body.append(call.format(allocs[0]))
                else:
                    body.append(call.format("None"))
            else:
                if n.inplace is not None:
                    b = ins[n.inplace]
                    body += [f"if {writable_expr(b)}:",
                             f"    o = [{b}]",
                             "else:",
                             f"    o = {make}"]
                else:
                    body.append(f"o = {make}")
                body.append(f"{fn}(a, o, {attrs})")
            body += [f"vals[{s}] = o[{k}]" for k, s in enumerate(outs)]
            if kind == "kernel":
                node = bind(n, "N", i)
                body = ["try:"] + ["    " + b for b in body] + [
                    "except UNSUPPORTED as u:",
                    f"    o = DECLINED({node}, [vals[s] for s in {list(n.inputs)!r}], u)"] + [
                    f"    vals[{s}] = o[{k}]" for k, s in enumerate(outs)]
        elif kind == "list":   # runtime/lists.py: host lists pass as they are
            arrays = "[" + ", ".join(f"({v} if type({v}) is HL else AS({v}))" for v in ins) + "]"
            body += reads + [f"o = {bind(n.fn, 'F', i)}({arrays}, {bind(n.attrs, 'A', i)})"]
            body += [f"vals[{s}] = o[{k}]" for k, s in enumerate(outs)]
        elif run_tf == "stock":
            ts = "[" + ", ".join(f"AT(vals[{s}])" for s in n.inputs) + "]"
            body.append(f"o = XS({bind(n.op, 'OP', i)}, {ts}, {bind(n.raw_attrs, 'RA', i)}, "
                        f"{len(outs)})")
            body += [f"vals[{s}] = o[{k}]" for k, s in enumerate(outs)]
        elif run_tf == "reads":
            hs = "[" + ", ".join(f"vals[{s}]" for s in n.inputs) + "]"
            body.append(f"o = RV({hs}, {bind(n.raw_attrs, 'RA', i)})")
            body += [f"vals[{s}] = o[{k}]" for k, s in enumerate(outs)]
        else:   # TensorFlow inside, control flow, dynamic shapes: the interpreter's step
            run_tf = "step"
            body += [f"STEP({bind(n, 'N', i)}, vals, failed)", "if failed:",
                     f"    return {i + 1}, None"]
        body += [f"vals[{s}] = None" for s in drops[i]]
        text = "\n".join(body)
        # the node's locals let go of its inputs: a value dropped after its last use must
        # really die (a variable's read still alive makes TensorFlow copy the whole variable
        # on its next update: 784x256 float32, every training step)
        if ins and f"{ins[0]} = vals[" in text:
            body.append(f"del {', '.join(ins)}")
        if "a = [" in text:
            body.append("a = None")
        if not body:
            continue
        block = [f"    # #{i} {kind}:{n.op} [{n.name}]", "    try:"]
        block += ["        " + b for b in body]
        block += ["    except Exception as e:", f"        return {i}, e"]
        blocks.append((block, run_tf is not None))
    return _chunked(blocks), env


# Nodes per generated function. TensorFlow captures the Python stack on every eager op
# (TFE_Py_Execute) and works out each frame's line by scanning its code object's line table
# from the start up to the current instruction: in one straight-line function, a TensorFlow
# node after 30 of ours paid 28 us for a 1-element AddV2 against 15 us at the top (AVX2 EPYC),
# and the cost grows with the node's position. Chunks keep every frame short, and a node that
# may run TensorFlow (directly or through STEP) starts a chunk of its own: an MLP training
# step's six AssignSubVariableOps 44 -> 36 us each (median, AMD EPYC).
CHUNK = 24


def _chunked(blocks):
    """blocks: (lines, runs TensorFlow) per node."""
    parts = []
    for b, tf_node in blocks:
        if not parts or len(parts[-1]) >= CHUNK or (tf_node and parts[-1]):
            parts.append([])
        parts[-1].append(b)
    lines = []
    calls = ["def drive(vals, failed):"]
    for k, part in enumerate(parts):
        name = f"_part{k}"
        lines.append(f"def {name}(vals, failed):")
        for b in part:
            lines += b
        lines += ["    return None", ""]
        calls += [f"    r = {name}(vals, failed)", "    if r is not None:", "        return r"]
    calls.append("    return None")
    return "\n".join(lines + calls) + "\n"


def cached_name(src, filename):
    """Where (under the cache directory) the code object of `src` is kept."""
    import hashlib
    import importlib.util
    import os

    from kernels import cache_prune
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + filename.encode() + b"\0"
                            + src.encode()).hexdigest()[:32]
    return os.path.join(cache_prune.DRIVERS, digest + ".marshal")


def _compiled(src, filename):
    """compile(src) through `<cache dir>/drivers/<digest>.marshal`: a Keras training step's
    driver is thousands of lines, 16 ms of Python's compiler in every process that runs it (its
    source is the same from one process to the next); keyed by the source, its filename and the
    interpreter's bytecode version."""
    import marshal

    import kernels

    def load(data):
        code = marshal.loads(data)
        ok = type(code) is type(_compiled.__code__) and code.co_filename == filename
        return code if ok else None
    return kernels.kept(cached_name(src, filename), load,
                        lambda: compile(src, filename, "exec"), marshal.dumps)


def build(prog, step, declined, as_numpy, empty, view, view_ops, small_bytes=0, plain_below=0,
          tensorflow=None, out_shapes=None):
    """The compiled driver of a finalized program: drive(vals, failed) -> None when every node
    ran, or (index, exception): node `index` raised `exception` (None: the interpreter already
    recorded a failure before node `index`). `view(node, arrays)` runs a view op.
    `tensorflow`: (direct, execute, as_tensor, read_variables) to run plain TensorFlow nodes
    without the interpreter's frames under TensorFlow's stack capture (see `source`)."""
    direct, xs, at, rv = tensorflow if tensorflow is not None else (None, None, None, None)
    src, env = source(prog, view, view_ops, small_bytes, plain_below, direct, out_shapes)
    env.update(ND=BUFFER, HL=HostList, AS=as_numpy, EMPTY=empty, NPEMPTY=np.empty, STEP=step,
               DECLINED=declined, UNSUPPORTED=Unsupported, XS=xs, AT=at, RV=rv,
               RUNK=out_shapes)   # run-time kernel outputs
    code = _compiled(src, f"<driver {prog.name}>")
    exec(code, env)
    drive = env["drive"]
    drive.source = src
    return drive
