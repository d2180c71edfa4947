"""Scheduling facts for the executor: does the program have heavy nodes that may run at the same
time (neither depends on the other)? Only then is the concurrent path worth its bookkeeping."""
import math
import os

from ... import devices
from ...executor import BLAS_OPS, VIEW_OPS

# On a small machine a node that already spreads over every core on its own does not gain from
# running beside another: there it is not heavy for scheduling and runs on the thread that
# made it ready, with numba's whole team. Measured on 2 cores:
# - GEMMs (BLAS-backed nodes): ResNet-50 b1 ran 81-105 ms per call with its shortcut
#   convolutions concurrent, 68-76 ms serial (session 3; OpenBLAS's worker spun between calls,
#   so a third busy thread shared the two cores).
# - Fused elementwise loops big enough for the team (fusion.splits): bench_programs' 2-branch
#   graph (exp/sin/cos chains on two 200x500 inputs) ran 1.81-1.83x faster than our one-thread
#   run with each chain split over both cores in turn, against 1.57-1.59x with the two chains
#   concurrent on one core each (worker wake-up, GIL hand-off between the branches' Python
#   prologues, and the branch that ends first leaves its core idle).
SERIAL_SPLITTING = (os.cpu_count() or 1) <= 4
# Below this many elements (inputs and outputs, times the steps of a fused loop) a node costs
# less than handing a branch to a pool worker (the 2-branch graph's 100K-element sums: 35 us
# each, against 60-300 us for a worker to start)
CONCURRENT_MIN = 1 << 18


def _elements(prog, slots):
    total = 0
    for s in slots:
        spec = prog.slot_specs.get(s)
        if spec is None or not spec.fully_defined:
            return None
        total += math.prod(spec.shape)
    return total


def _splits(prog, n):
    if n.op.split("+", 1)[0] in BLAS_OPS:
        return True
    if n.kind == "fused" and n.op == "Fused":
        # the loop runs over its largest operand (the input of a fused Sum/Mean: fuse_reduce)
        sizes = [_elements(prog, [s]) for s in list(n.inputs) + list(n.outputs)]
        fusion = devices.library("fusion")
        return (None not in sizes and fusion is not None
                and fusion.splits(max(sizes), len(n.fused_ops)))
    return False


def _worth_a_thread(prog, n):
    """Heavy for scheduling: large enough to repay a worker, and (on a small machine) not a
    node that spreads over the cores by itself."""
    if SERIAL_SPLITTING and _splits(prog, n):
        return False
    work = _elements(prog, list(n.inputs) + list(n.outputs))
    return work is None or work * max(len(n.fused_ops), 1) >= CONCURRENT_MIN


def run(prog):
    prog.finalize()
    for n in prog.nodes:
        # a view (Keras' Flatten: a Reshape of 256x8x8x64) computes nothing
        if n.heavy and (n.op in VIEW_OPS or not _worth_a_thread(prog, n)):
            n.heavy = False
    heavy_bit = {}
    for n in prog.nodes:
        if n.heavy:
            heavy_bit[n.id] = 1 << len(heavy_bit)
    anc = [0] * len(prog.nodes)          # bitset of heavy ancestors per node
    preds = [[] for _ in prog.nodes]
    for n in prog.nodes:
        for s in prog.succs[n.id]:
            preds[s].append(n.id)
    for n in prog.nodes:
        a = 0
        for p in preds[n.id]:
            a |= anc[p] | heavy_bit.get(p, 0)
        anc[n.id] = a
    parallel = False
    ids = list(heavy_bit)
    all_heavy = sum(heavy_bit.values())
    for i in ids:
        # heavy nodes that are neither ancestors nor descendants of i
        desc = 0
        for j in ids:
            if anc[j] & heavy_bit[i]:
                desc |= heavy_bit[j]
        if all_heavy & ~(anc[i] | desc | heavy_bit[i]):
            parallel = True
            break
    prog.parallel = parallel
    if parallel:
        prog.notes.append("schedule: independent heavy nodes, concurrent execution")
    return prog
