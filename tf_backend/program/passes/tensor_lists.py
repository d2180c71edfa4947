"""TensorLists on our runtime: TensorFlow's list ops (TensorArrays, while_v2's gradient
accumulators in Keras' LSTM/GRU training) become `list` nodes over runtime/lists.py's HostList
instead of one TensorFlow call each (about 20 us apiece: an LSTM training step ran 2,700).

A web is the set of slots one list value flows through, across sub-programs: list ops' handles,
Identity, While loop variables (cond and body inputs, body outputs, the While's outputs), If and
Case branch inputs and outputs. A web runs on our runtime only when all of it stays inside the
function (no program input, output or constant), every node that produces one of its slots is a
list op, AddN over lists, Identity or control flow, and every node that reads one is too: a
list TensorFlow must see (an op we do not run, a call) keeps the whole web on TensorFlow.
Runs on the whole program at once (the top level); in sub-programs it finds nothing new.
"""
from ... import tf_adapter as tfa
from ...runtime import lists

PASS_THROUGH = ("alias", "while", "if", "case")


def _attrs(node):
    raw = dict(zip(node.raw_attrs[::2], node.raw_attrs[1::2]))
    out = {}
    for k, v in raw.items():
        if k in ("element_dtype", "shape_type", "Tshape", "T"):
            dt = tfa.ENUM_TO_DTYPE.get(v)
            if dt is None:
                return None
            out[k] = dt
        elif k in ("resize_if_index_out_of_bounds", "num_elements"):
            out[k] = v
    return out


def _on_lists(prog, n):
    """AddN/ZerosLike over lists (gradient aggregation): all inputs and outputs are lists."""
    spec = prog.slot_specs.get(n.outputs[0]) if n.outputs else None
    return (n.kind == "stock" and n.op in lists.ON_LISTS and spec is not None
            and spec.dtype.kind == "O")


def run(prog):
    parent = {}

    def find(k):
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    listed = set()      # keys that are list handles of list ops
    candidates = []     # (program, node, attrs)
    programs = []

    def visit(p):
        programs.append(p)
        key = lambda s: (id(p), s)   # noqa: E731
        for n in p.nodes:
            if n.kind == "stock" and n.op in lists.OPS:
                _, lin, lout = lists.OPS[n.op]
                keys = [key(n.inputs[i]) for i in lin] + [key(n.outputs[o]) for o in lout]
                listed.update(keys)
                for k in keys[1:]:
                    union(keys[0], k)
                candidates.append((p, n))
            elif _on_lists(p, n):
                keys = [key(s) for s in n.inputs + n.outputs]
                listed.update(keys)
                for k in keys[1:]:
                    union(keys[0], k)
                candidates.append((p, n))
            elif n.kind == "alias":
                for i, o in zip(n.inputs, n.outputs):
                    union(key(i), key(o))
            elif n.kind == "while":
                cond, body = n.subs
                for i, s in enumerate(n.inputs):
                    union(key(s), (id(cond), cond.inputs[i]))
                    union(key(s), (id(body), body.inputs[i]))
                    union(key(s), (id(body), body.outputs[i]))
                    if i < len(n.outputs):
                        union(key(s), key(n.outputs[i]))
            elif n.kind in ("if", "case"):
                for sub in n.subs:
                    for i, s in enumerate(n.inputs[1:]):
                        union(key(s), (id(sub), sub.inputs[i]))
                    for j, o in enumerate(n.outputs):
                        union((id(sub), sub.outputs[j]), key(o))
            for sub in n.subs:
                visit(sub)

    visit(prog)
    if not candidates:
        return prog
    webs = {find(k) for k in listed}
    bad = set()
    for s in prog.inputs + prog.outputs + list(prog.consts):
        bad.add(find((id(prog), s)))
    convertible = {id(n) for _, n in candidates}
    attrs_of = {}
    for p, n in candidates:
        a = attrs_of[id(n)] = _attrs(n) if n.op in lists.OPS else {}
        if a is None:   # a dtype we do not know: the whole web stays on TensorFlow
            bad.add(find((id(p), (n.outputs or n.inputs)[0])))
    for p in programs:
        for s in p.consts:
            bad.add(find((id(p), s)))
        for n in p.nodes:
            ok_in = ok_out = n.kind in PASS_THROUGH or id(n) in convertible
            if id(n) in convertible and n.op in lists.OPS:
                _, lin, lout = lists.OPS[n.op]
                ok_in_pos, ok_out_pos = set(lin), set(lout)
            else:
                ok_in_pos = ok_out_pos = None
            for k, s in enumerate(n.inputs):
                r = find((id(p), s))
                if r in webs and not (ok_in and (ok_in_pos is None or k in ok_in_pos)
                                      and not (n.kind in ("if", "case") and k == 0)):
                    bad.add(r)
            for k, s in enumerate(n.outputs):
                r = find((id(p), s))
                if r in webs and not (ok_out and (ok_out_pos is None or k in ok_out_pos)):
                    bad.add(r)
    count = 0
    for p, n in candidates:
        k = n.outputs[0] if n.outputs else n.inputs[0]
        if n.op in lists.OPS:
            _, lin, lout = lists.OPS[n.op]
            k = n.outputs[lout[0]] if lout else n.inputs[lin[0]]
        if find((id(p), k)) in bad:
            continue
        attrs = attrs_of[id(n)]
        n.kind, n.attrs, n.reason = "list", attrs, None
        n.fn = lists.OPS[n.op][0] if n.op in lists.OPS else lists.ON_LISTS[n.op]
        count += 1
    if count:
        prog.notes.append(f"tensor_lists: {count} list ops on our runtime "
                          f"({len(webs - bad)} of {len(webs)} list webs)")
    return prog
