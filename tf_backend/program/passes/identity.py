"""Identity elimination: alias nodes (Identity, StopGradient, IdentityN...) disappear; their
consumers and the program outputs read the source slot directly. An alias that carries control
edges becomes a noop so the ordering survives."""


def run(prog):
    sub = {}

    def root(s):
        while s in sub:
            s = sub[s]
        return s

    kept, removed = [], 0
    for n in prog.nodes:
        n.inputs = [root(s) for s in n.inputs]
        if n.kind == "alias":
            for o, i in zip(n.outputs, n.inputs):
                sub[o] = i
            removed += 1
            if not n.ctrl:
                continue
            n.kind, n.inputs, n.outputs = "noop", [], []
        kept.append(n)
    # a removed alias may be the control predecessor of others: they now wait on its inputs' producers
    producer = prog.producers()
    removed_nodes = {id(n) for n in prog.nodes} - {id(n) for n in kept}
    for n in kept:
        new_ctrl = []
        for c in n.ctrl:
            if id(c) in removed_nodes:
                new_ctrl.extend(producer[s] for s in c.inputs if s in producer)
            else:
                new_ctrl.append(c)
        n.ctrl = new_ctrl
    prog.nodes = kept
    prog.outputs = [root(s) for s in prog.outputs]
    if removed:
        prog.notes.append(f"identity: removed {removed} alias nodes")
    return prog
