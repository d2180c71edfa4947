"""Compiled regions: a run of consecutive small nodes that all inline (kernels/cpu/loops.py's
forms: elementwise and fused chains, products, data movement, reductions, reshapes) becomes one
`region` node whose compiled function does their work in one call (issue 15 item 4): each node
of a program costs a Python call and its dispatch in the driver, which for tensors of a few
elements is all of its time (a 200-node chain of 4x4 products and transposes, ~4.6 us a node).

This pass only describes the region as data (`node.spec`, a kernels/regions.Region) and keeps
the nodes it replaces (`attrs["nodes"]`); the executor runs those until the device's function
is compiled (in a child process, as compiled loops are), or for good where the device declines.
Small: every value the region reads or writes has at most MAX_ELEMENTS elements; larger ones
are worth their own kernel call (and its threads).
"""
import os

import numpy as np

from kernels.regions import Ineligible, Region, Step

from ... import devices
from ..ir import Node
from .compile_loops import _step

MIN_NODES = 6
MAX_NODES = 64       # numba and LLVM take ~0.1 s a node: a 200-node region compiled in 19 s
MAX_ELEMENTS = 8192
ENABLED = os.environ.get("TF_BACKEND_REGIONS", "1") != "0"


def _small_spec(spec):
    return (spec is not None and spec.shape is not None and spec.fully_defined
            and spec.dtype.kind in "fiub" and int(np.prod(spec.shape, dtype=np.int64))
            <= MAX_ELEMENTS)


def _candidate(prog, n):
    if n.kind not in ("kernel", "fused") or n.ctrl or n.out_specs is None:
        return False
    if not all(_small_spec(s) for s in n.out_specs):
        return False
    for s in n.inputs:
        if s in prog.consts:
            continue
        if not _small_spec(prog.slot_specs.get(s)):
            return False
    return True


def _types(prog, slots):
    out = {}
    for s in slots:
        if s in prog.consts:
            c = np.asarray(prog.consts[s])
            out[s] = ("a", c.dtype, c.shape)
        else:
            sp = prog.slot_specs[s]
            out[s] = ("a", np.dtype(sp.dtype), tuple(sp.shape))
    return out


def _inlines(prog, n):
    """Whether the device writes this node inline (a one-node region's source)."""
    loops = devices.library("loops")
    if loops is None:
        return False
    slots = list(dict.fromkeys(list(n.inputs) + list(n.outputs)))
    ins = [s for s in n.inputs if s not in prog.consts]
    try:
        step = _step(n, [("a", np.dtype(s.dtype), tuple(s.shape)) for s in n.out_specs])
        loops.region_source(Region(list(dict.fromkeys(ins)), [step], list(n.outputs),
                                   {s: prog.consts[s] for s in n.inputs if s in prog.consts},
                                   _types(prog, slots)))
        return True
    except (Ineligible, KeyError):
        return False


def run(prog):
    if not ENABLED:
        return prog
    consumers_after = {}
    for i, n in enumerate(prog.nodes):
        for s in n.inputs:
            consumers_after.setdefault(s, []).append(i)
    runs, cur = [], []
    for i, n in enumerate(prog.nodes):
        if _candidate(prog, n) and _inlines(prog, n):
            cur.append(i)
            if len(cur) == MAX_NODES:
                runs.append(cur)
                cur = []
        else:
            if len(cur) >= MIN_NODES:
                runs.append(cur)
            cur = []
    if len(cur) >= MIN_NODES:
        runs.append(cur)
    if not runs:
        return prog
    replace = {}
    gone = set()
    outs_prog = set(prog.outputs)
    for r in runs:
        nodes = [prog.nodes[i] for i in r]
        made = {s for n in nodes for s in n.outputs}
        last = r[-1]
        inputs = list(dict.fromkeys(s for n in nodes for s in n.inputs
                                    if s not in made and s not in prog.consts))
        outputs = [s for s in dict.fromkeys(s for n in nodes for s in n.outputs)
                   if s in outs_prog or any(j > last for j in consumers_after.get(s, ()))]
        slots = set(inputs) | made | {s for n in nodes for s in n.inputs}
        types = _types(prog, slots)
        steps = [_step(n, [types[s] for s in n.outputs]) for n in nodes]
        consts = {s: prog.consts[s] for n in nodes for s in n.inputs if s in prog.consts}
        spec = Region(inputs, steps, outputs, consts, types)
        node = Node(f"region[{nodes[0].name}..{nodes[-1].name}]", "Region", "region", inputs,
                    outputs, attrs={"nodes": nodes}, where=nodes[0].where)
        node.spec = spec
        replace[r[0]] = node
        gone.update(r[1:])
    prog.nodes = [replace.get(i, n) for i, n in enumerate(prog.nodes) if i not in gone]
    prog.notes.append(f"compile_regions: {len(runs)} regions of "
                      f"{sum(len(r) for r in runs)} small nodes, each one compiled call")
    return prog
