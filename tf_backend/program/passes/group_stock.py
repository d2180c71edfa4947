"""TensorFlow's nodes back to back: a program's order is rescheduled so that its TensorFlow
nodes (variable reads, assignments, anything we leave to TensorFlow) run in runs rather than
one between each pair of our nodes.

Why: a lone eager op after other work costs 2-4x one that follows another (measured on the AVX2
EPYC VM: a ReadVariableOp 11-12 us back to back, 22-30 us after 0.2 ms of other work or idle;
inside a training step 40-50 us each: its caches and TensorFlow's threads gone cold). An MLP
SGD step interleaves six gradient products with six AssignSubVariableOps: each assignment paid
that price.

How: list scheduling over data and control edges, in phases: TensorFlow's nodes run while any
of them is ready (first the reads that depend on none of our nodes), then ours while any of ours
is ready, and so on, each side in program order; TensorFlow nodes that wait on ours gather at
the points where our work runs out (the optimizer's assignments at the end), and a run of them
is not cut short by one of our nodes that became ready in between. Among
TensorFlow nodes other than reads the program's order stays (a later one never overtakes an
earlier one), except that variable ops (tf_adapter.GROUP_OPS) on different variables of the
program's handles keep only their order relative to each other node on the same handle and
to every other TensorFlow node: TensorFlow's automatic control dependencies chain the ops of
one resource, not of different ones, so stock's executor may run them in either order too.
An optimizer step then makes two TensorFlow runs (every slot update, then every weight
update), not one per variable where a weight's update waits on our kernel.
"""
import heapq

from ... import tf_adapter as tfa

_TF = ("stock", "reads")


def _variable(x, handles):
    """The handle slot a variable op of the program's own handles works on, else None."""
    if (x.kind == "stock" and x.op in tfa.GROUP_OPS and x.inputs and x.inputs[0] in handles
            and not x.subs and not x.attrs.get("xla_function")):
        return x.inputs[0]
    return None


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
    # effects keep the program's order: per variable, and every other one against all
    handles = set(prog.inputs)
    last_any, last_other, last_on = None, None, {}
    for i, x in enumerate(nodes):
        if x.kind not in _TF or _pure_read(x):
            continue
        h = _variable(x, handles)
        if h is None:
            if last_any is not None:
                for j in {last_any, *last_on.values()}:
                    preds[i].add(j)
            last_other, last_on = i, {}
        else:
            for j in (last_other, last_on.get(h)):
                if j is not None:
                    preds[i].add(j)
            last_on[h] = i
        last_any = i
    succs = [[] for _ in range(n)]
    count = [len(p) for p in preds]
    for i, p in enumerate(preds):
        for j in p:
            succs[j].append(i)

    # two ready lists, ours and TensorFlow's, each in program order; the side that runs keeps
    # running while it has a ready node, TensorFlow's first: the reads that need none of ours
    # (an effect ready that early, as a step counter's increment, waits for the next run of
    # TensorFlow's nodes instead of joining the reads)
    tf_node = [x.kind in _TF for x in nodes]
    ready = {True: [], False: []}
    held = []     # effects ready before any of our nodes ran

    def push(i):
        if tf_node[i] and not started and not _pure_read(nodes[i]):
            held.append(i)
        else:
            heapq.heappush(ready[tf_node[i]], i)

    started = not any(not t for t in tf_node)
    for i in range(n):
        if count[i] == 0:
            push(i)
    out, side = [], True
    while ready[True] or ready[False] or held:
        if not ready[side]:
            side = not side
            if not ready[side]:   # only held effects left
                started = True
                for i in held:
                    heapq.heappush(ready[True], i)
                held, side = [], True
        i = heapq.heappop(ready[side])
        if not side and not started:
            started = True
            for j in held:
                heapq.heappush(ready[True], j)
            held = []
        out.append(nodes[i])
        for j in succs[i]:
            count[j] -= 1
            if count[j] == 0:
                push(j)
    if len(out) != n:   # a cycle cannot happen in a valid program; keep it as it was
        return prog
    moved = sum(1 for a, b in zip(out, nodes) if a is not b)
    if moved:
        prog.nodes = out
        prog.notes.append(f"group_stock: {moved} nodes reordered so TensorFlow's run together")
    return prog


def _pure_read(x):
    return x.kind == "reads" or (x.kind == "stock" and x.op == "ReadVariableOp")
