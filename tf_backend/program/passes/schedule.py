"""Scheduling facts for the executor: does the program have heavy nodes that may run at the same
time (neither depends on the other)? Only then is the concurrent path worth its bookkeeping."""


def run(prog):
    prog.finalize()
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
