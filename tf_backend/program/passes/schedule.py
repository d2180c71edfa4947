"""Scheduling facts for the executor: does the program have heavy nodes that may run at the same
time (neither depends on the other)? Only then is the concurrent path worth its bookkeeping."""
import os

from ...executor import BLAS_OPS

# One GEMM already has every core through BLAS's own threads on a small machine; two at once
# (each held to one BLAS thread) lost to one after the other: ResNet-50 b1 on 2 cores ran
# 81-105 ms per call with its shortcut convolutions concurrent, 68-76 ms serial (OpenBLAS's
# worker spins between calls, so a third busy thread shares the two cores). There, BLAS-backed
# nodes are not heavy for scheduling: they run on the thread that made them ready.
SERIAL_BLAS = (os.cpu_count() or 1) <= 4


def run(prog):
    prog.finalize()
    if SERIAL_BLAS:
        for n in prog.nodes:
            if n.heavy and n.op.split("+", 1)[0] in BLAS_OPS:
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
