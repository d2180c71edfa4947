"""Dead code elimination: drop nodes whose results nobody reads, unless they have effects."""


def run(prog):
    needed = set(prog.outputs)
    live_ids = set()
    for n in reversed(prog.nodes):
        effect = n.stateful or n.kind in ("if", "while", "case") and n.stateful
        if effect or any(s in needed for s in n.outputs) or id(n) in live_ids:
            live_ids.add(id(n))
            needed.update(n.inputs)
            live_ids.update(id(c) for c in n.ctrl)
    before = len(prog.nodes)
    prog.nodes = [n for n in prog.nodes if id(n) in live_ids]
    used = set(needed)
    prog.consts = {s: v for s, v in prog.consts.items() if s in used}
    if before != len(prog.nodes):
        prog.notes.append(f"dce: removed {before - len(prog.nodes)} nodes")
    return prog
