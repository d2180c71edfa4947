"""Compiled loops: a While whose condition and body have only nodes a device can inline becomes
one compiled function with the loop inside (kernels/regions.Loop, compiled by the device:
kernels/cpu/loops.py). This pass only describes the loop as data (`node.spec`); the executor
builds the function on first use and falls back to running the sub-programs when the device
declines it (the reason goes to the program's notes and the ledger).

What a loop may hold: our kernels and fused nodes (elementwise chains, products with their
epilogues), list ops, aliases, and variable reads that loop_reads marked loop-invariant (they
run once before the loop and enter it as arguments). A TensorFlow node, nested control flow, or
a slot without a static shape keeps the loop interpreted.
"""
import numpy as np

from kernels.regions import Ineligible, Loop, Region, Step, Webs

ITEM_IN = {"TensorListSetItem": 2, "TensorListPushBack": 1}     # op -> item input position
ITEM_OUT = {"TensorListGetItem": 0, "TensorListPopBack": 1}     # op -> item output position


def run(prog):
    done = 0
    for n in prog.nodes:
        if n.kind != "while" or n.spec is not None:
            continue
        try:
            n.spec = describe(prog, n)
            done += 1
        except Ineligible as e:
            n.reason = f"loop not compiled: {e}"
            prog.notes.append(f"compile_loops: {n.name}: {e}")
    if done:
        prog.notes.append(f"compile_loops: {done} While loops described for compilation")
    return prog


def _array_type(spec, where):
    if spec is None or spec.shape is None or not spec.fully_defined:
        raise Ineligible(f"{where}: no static shape")
    if spec.dtype.kind == "O":
        raise Ineligible(f"{where}: an object value")
    return ("a", np.dtype(spec.dtype), tuple(spec.shape))


def _list_webs(cond, body, n_vars):
    """Element (dtype, shape) of each list slot: ("c"|"b", slot) and ("v", k) for loop
    variables, from the list ops' items and attrs, joined through ops and loop variables."""
    webs = Webs()
    find, union = webs.find, webs.union

    info = {}
    notes = []   # applied once every union is made (a root changes as webs join)

    def note(key, dtype=None, shape=None):
        notes.append((key, dtype, shape))

    def apply(key, dtype=None, shape=None):
        r = find(key)
        d, s = info.get(r, (None, None))
        if dtype is not None:
            if d is not None and d != dtype:
                raise Ineligible("a list with two element dtypes")
            d = dtype
        if shape is not None:
            if s is not None and s != shape:
                raise Ineligible(f"a list with element shapes {s} and {shape}")
            s = shape
        info[r] = (d, s)

    lists = set()
    for tag, prog in (("c", cond), ("b", body)):
        for k, s in enumerate(prog.inputs):
            union((tag, s), ("v", k))
        if tag == "b":
            for k, s in enumerate(prog.outputs):
                union((tag, s), ("v", k))
        for n in prog.nodes:
            if n.kind == "list" or (n.kind == "stock" and n.op == "AddN"):
                handles = [s for s in n.inputs + n.outputs
                           if (sp := prog.slot_specs.get(s)) is not None and sp.dtype.kind == "O"]
                if n.op == "TensorListGetItem" or n.op == "TensorListPopBack" or \
                        n.op in ("TensorListLength", "TensorListElementShape",
                                 "TensorListStack"):
                    handles = [n.inputs[0]] + ([n.outputs[0]] if n.op == "TensorListPopBack"
                                               else [])
                elif n.op in ("TensorListSetItem", "TensorListPushBack"):
                    handles = [n.inputs[0], n.outputs[0]]
                elif n.op == "TensorListReserve":
                    handles = [n.outputs[0]]
                for h in handles:
                    lists.add((tag, h))
                    union((tag, h), (tag, handles[0]))
                dt = n.attrs.get("element_dtype")
                if dt is not None:
                    note((tag, handles[0]), dtype=np.dtype(dt))
                item = None
                if n.op in ITEM_IN:
                    item = prog.slot_specs.get(n.inputs[ITEM_IN[n.op]])
                elif n.op in ITEM_OUT:
                    item = prog.slot_specs.get(n.outputs[ITEM_OUT[n.op]])
                if item is not None and item.shape is not None and item.fully_defined:
                    note((tag, handles[0]), dtype=np.dtype(item.dtype), shape=tuple(item.shape))
            elif n.kind == "alias":
                for s, o in zip(n.inputs, n.outputs):
                    union((tag, o), (tag, s))
    for args in notes:
        apply(*args)
    return lists, {k: info.get(find(k), (None, None)) for k in lists | {
        ("v", k) for k in range(n_vars)}}, find


def describe(prog, node):
    cond, body = node.subs
    n_vars = len(node.inputs)
    if len(cond.outputs) != 1 or len(body.outputs) != n_vars or len(body.inputs) != n_vars:
        raise Ineligible("loop variables and body outputs differ in number")
    lists, elems, find = _list_webs(cond, body, n_vars)
    list_roots = {find(k) for k in lists}
    var_types = []
    for k, s in enumerate(node.inputs):
        spec = body.slot_specs.get(body.inputs[k])
        if find(("v", k)) in list_roots:
            dt, shape = elems[("v", k)]
            if dt is None or shape is None:
                raise Ineligible(f"loop variable {k}: a list of unknown element type")
            var_types.append(("l", dt, shape))
        elif spec is not None and spec.dtype.kind == "O":
            if body.outputs[k] != body.inputs[k]:
                raise Ineligible(f"loop variable {k}: a handle the body changes")
            var_types.append(("h",))
        else:
            var_types.append(_array_type(spec or prog.slot_specs.get(s), f"loop variable {k}"))

    def region(tag, p, outputs):
        types, steps, pre = {}, [], []
        for k, s in enumerate(p.inputs):
            types[s] = var_types[k]
        for s in p.consts:
            if s not in types:
                c = np.asarray(p.consts[s])
                if c.dtype.kind == "O":
                    raise Ineligible(f"{tag} constant %{s}: an object")
                types[s] = ("a", c.dtype, c.shape)

        def slot_type(s, where):
            if s in types:
                return types[s]
            if (tag, s) in lists:
                dt, shape = elems[(tag, s)]
                if dt is None or shape is None:
                    raise Ineligible(f"{where}: a list of unknown element type")
                t = ("l", dt, shape)
            else:
                t = _array_type(p.slot_specs.get(s), f"{where} %{s}")
            types[s] = t
            return t

        # a compiled region inside the body (compile_regions) joins the loop as its nodes
        for n in [m for x in p.nodes for m in (x.attrs["nodes"] if x.kind == "region" else [x])]:
            where = f"{n.op} [{n.name}]"
            if n.kind == "reads":
                if not n.attrs.get("loop_invariant") or tag != "b":
                    raise Ineligible(f"{where}: a variable read inside the loop")
                for s in n.outputs:
                    slot_type(s, where)
                    pre.append(s)
                continue
            if n.kind not in ("kernel", "fused", "list", "alias", "noop") and not (
                    n.kind == "stock" and n.op == "AddN" and all((tag, s) in lists
                                                                for s in n.outputs)):
                raise Ineligible(f"{where}: {n.kind} node")
            if n.ctrl and n.kind != "noop":
                raise Ineligible(f"{where}: control edges")
            for s in n.inputs:
                slot_type(s, where)
            types_out = [slot_type(s, where) for s in n.outputs]
            steps.append(_step(n, types_out))
        for s in outputs:
            slot_type(s, "output")
        return Region(p.inputs, steps, outputs, dict(p.consts), types, pre)

    c = region("c", cond, cond.outputs)
    b = region("b", body, body.outputs)
    return Loop(node.name, var_types, c, b)


def _step(n, types):
    kind = "kernel" if n.kind == "stock" else n.kind
    kfn = n.kdef.fn if n.kind == "kernel" and n.kdef is not None else None
    if n.kind == "fused":
        sp = n.spec
        if isinstance(sp, tuple) and sp and sp[0] == "epilogue":
            _, m, e, k = sp
            prod = _step(m, [types[0]])
            epi = _step(e, types)
            return Step(n.op, "fused", {}, n.inputs, n.outputs, types, parts=(prod, epi, k))
        if sp is None or n.op.endswith("+epilogue"):   # fuse_reduce's chains have none
            raise Ineligible(f"{n.op}[{' -> '.join(n.fused_ops)}]: a fused node without a spec")
        if isinstance(sp, tuple) and sp and isinstance(sp[0], str):   # e.g. pool_relu_grad's
            raise Ineligible(f"{n.op}: a {sp[0]} node (its device kernel runs it)")
        return Step(n.op, "fused", {}, n.inputs, n.outputs, types, fusion=sp)
    return Step(n.op, kind, dict(n.attrs), n.inputs, n.outputs, types, kfn=kfn)
