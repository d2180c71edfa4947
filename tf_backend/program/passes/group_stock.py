"""TensorFlow's nodes back to back: a program's order is rescheduled so that its TensorFlow
nodes (variable reads, assignments, anything we leave to TensorFlow) run in runs rather than
one between each pair of our nodes.

Why: a lone eager op after other work costs 2-4x one that follows another (measured on the AVX2
EPYC VM: a ReadVariableOp 11-12 us back to back, 22-30 us after 0.2 ms of other work or idle;
inside a training step 40-50 us each: its caches and TensorFlow's threads gone cold). An MLP
SGD step interleaves six gradient products with six AssignSubVariableOps: each assignment paid
that price.

How: list scheduling over data and control edges. TensorFlow nodes that depend on none of our
nodes (reads of the program's handles) go first, as early as they are ready; our nodes keep
their order; TensorFlow nodes that wait on ours run only when none of ours is ready, so they
gather at the points where our work runs out (the optimizer's assignments at the end). Among
TensorFlow nodes other than reads the program's order stays (a later one never overtakes an
earlier one), whatever their effects.
"""
import heapq

_TF = ("stock", "reads")


def run(prog):
    nodes = prog.nodes
    n = len(nodes)
    if n < 3 or not any(x.kind in _TF for x in nodes):
        return prog
    index = {id(x): i for i, x in enumerate(nodes)}
    producer = {}
    for i, x in enumerate(nodes):
        for s in x.outputs:
            producer[s] = i
    preds = [set() for _ in range(n)]
    for i, x in enumerate(nodes):
        for s in x.inputs:
            p = producer.get(s)
            if p is not None and p != i:
                preds[i].add(p)
        for c in x.ctrl:
            j = index.get(id(c))
            if j is not None:
                preds[i].add(j)
    ordered = [i for i, x in enumerate(nodes) if x.kind in _TF and not _pure_read(x)]
    for a, b in zip(ordered, ordered[1:]):   # effects keep the program's order
        preds[b].add(a)
    # early: a TensorFlow node none of whose ancestors is ours
    early = [False] * n
    for i, x in enumerate(nodes):
        early[i] = x.kind in _TF and all(early[p] for p in preds[i])
    succs = [[] for _ in range(n)]
    count = [len(p) for p in preds]
    for i, p in enumerate(preds):
        for j in p:
            succs[j].append(i)

    def prio(i):
        x = nodes[i]
        return (0 if early[i] else 1 if x.kind not in _TF else 2, i)

    ready = [prio(i) for i in range(n) if count[i] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(nodes[i])
        for j in succs[i]:
            count[j] -= 1
            if count[j] == 0:
                heapq.heappush(ready, prio(j))
    if len(out) != n:   # a cycle cannot happen in a valid program; keep it as it was
        return prog
    moved = sum(1 for a, b in zip(out, nodes) if a is not b)
    if moved:
        prog.nodes = out
        prog.notes.append(f"group_stock: {moved} nodes reordered so TensorFlow's run together")
    return prog


def _pure_read(x):
    return x.kind == "reads" or (x.kind == "stock" and x.op == "ReadVariableOp")
