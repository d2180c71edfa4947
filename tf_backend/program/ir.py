"""The program IR: a flat, typed node list over value slots, with dependency counts.

TensorFlow-free. A slot holds one value at run time (numpy array or TensorFlow tensor).
Node kinds:
  kernel  our kernel (kdef, shape fn, canonical attrs)
  stock   TensorFlow's kernel for this node (per-node fallback; stateful ops in program order)
  alias   output slot = input slot (Identity and friends; removed by the identity pass)
  noop    no data; only orders its control successors
  if / while / case   control flow over sub-programs
  fused   a generated kernel for an elementwise chain (fusion passes; with a trailing Sum or
          Mean: fuse_reduce)
  reads   many ReadVariableOps in one TensorFlow call (batch_reads pass; raw_attrs: dtypes)
  memo    weight-derived kernel/fused nodes (attrs["nodes"]), rerun only when a read changed
  list    a TensorList op on runtime/lists.py's HostList (tensor_lists pass): fn(inputs, attrs)
  region  a run of small nodes compiled as one function (compile_regions; attrs["nodes"] run
          until it is compiled, or where the device declines it)
"""
import copy

from shape_fns.spec import fmt_shape


class Node:
    # ctrl: Node objects this node must run after (control edges)
    __slots__ = ("id", "name", "op", "kind", "inputs", "outputs", "ctrl", "attrs", "raw_attrs",
                 "kdef", "shape_fn", "value_free", "subs", "where", "reason", "out_specs",
                 "heavy", "fused_ops", "fn", "stateful", "inplace", "spec", "state_key")

    def __init__(self, name, op, kind, inputs, outputs, ctrl=(), attrs=None, raw_attrs=(),
                 where=""):
        self.id = -1
        self.name, self.op, self.kind = name, op, kind
        self.inputs, self.outputs, self.ctrl = list(inputs), list(outputs), list(ctrl)
        self.attrs = attrs or {}
        self.raw_attrs = raw_attrs
        self.kdef = self.shape_fn = None
        self.value_free = False
        self.subs = ()
        self.where = where
        self.reason = None
        self.out_specs = None
        self.heavy = False
        self.fused_ops = ()
        self.fn = None
        self.stateful = False
        self.inplace = None   # index of an input whose buffer receives the output
        self.spec = None      # fused elementwise nodes: (dtype, inputs, steps) of the chain
        self.state_key = None  # stock nodes whose kernel keeps state: (function, op name), the
        #                        same in every specialisation of the function (one kernel, as stock)


class Program:
    """Nodes in a valid execution order; slots 0..n_slots-1; inputs/outputs are slot ids."""

    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.n_slots = 0
        self.inputs = []
        self.outputs = []
        self.consts = {}        # slot -> host value known at compile time
        self.slot_specs = {}    # slot -> shape_fns.Spec (static; may have unknown dims)
        self.slot_names = {}    # slot -> "node:idx" for dumps and errors
        self.notes = []         # pass log: what each pass did
        self.prologue = []      # stock nodes run before the program, on its first inputs;
        #                         their outputs are its last inputs (lower.hoist_prologue)
        self.fusions = 0
        self.parallel = False   # independent heavy nodes exist (schedule pass)
        self.schedule_trial = 0   # executor: serial runs so far (an int), then serial vs
        #                           concurrent times while measuring (a dict), False: chosen
        # filled by finalize()
        self.succs = self.dep_counts = self.producer = None
        self.op_counts = None   # per run: {op: (backend, {fallback reason: n})}
        self.driver = None      # the generated serial driver (program/driver.py), built lazily
        self.cold = True        # interpreted until a run defers no kernel compile (_cold_run)
        self.waited = False     # its last run waited on a background compile (functions.py)
        self.choice = None      # "ours" | "tensorflow": who runs it (functions._choose)
        self.choice_trial = None   # while measuring: seconds per call per side (functions.py)
        self.agreement = None   # a collective function's workers choosing together: the
        #                         holder functions._agree fills, False once applied
        self.choice_rounds = 0  # trials done (functions._retrial measures an "ours" again)
        self.choice_calls = 0   # calls since the last choice
        self.choice_recheck = float("inf")   # ...at which it is measured again
        self.kernel_state = None   # any node keeps kernel state between calls (functions.py)
        self.tuned = False      # kernel choices made (tf_backend/autotune.py, first runs)
        self.tune_state = None  # while they are being measured

    def clone(self):
        """A copy to optimise on its own (functions.specialize: one lowering serves every
        specialisation): new nodes, sub-programs and containers; kernels, attribute values,
        specs and constants shared, as passes replace them and never write into them."""
        new = copy.copy(self)
        for k, v in vars(self).items():
            if type(v) in (list, dict, set):
                setattr(new, k, type(v)(v))
        made = {}

        def node(n):
            m = made.get(id(n))
            if m is None:
                m = made[id(n)] = copy.copy(n)
                m.inputs, m.outputs, m.attrs = list(n.inputs), list(n.outputs), dict(n.attrs)
                m.subs = tuple(sub.clone() for sub in n.subs)
            return m

        new.nodes = [node(n) for n in self.nodes]
        new.prologue = [node(n) for n in self.prologue]
        for m in list(made.values()):
            m.ctrl = [node(c) for c in m.ctrl]
        return new.finalize()

    def new_slot(self, name=""):
        s = self.n_slots
        self.n_slots += 1
        if name:
            self.slot_names[s] = name
        return s

    def add(self, node):
        node.id = len(self.nodes)
        self.nodes.append(node)
        return node

    def consumers(self):
        """slot -> number of reads; a program output counts as two (it always escapes)."""
        c = {}
        for n in self.nodes:
            for s in n.inputs:
                c[s] = c.get(s, 0) + 1
        for s in self.outputs:
            c[s] = c.get(s, 0) + 2
        return c

    def producers(self):
        """slot -> the node that writes it."""
        return {s: n for n in self.nodes for s in n.outputs}

    def finalize(self):
        """Renumber nodes and compute producers, successor lists and dependency counts."""
        for i, n in enumerate(self.nodes):
            n.id = i
        self.driver = None
        self.producer = {}
        for n in self.nodes:
            for s in n.outputs:
                self.producer[s] = n.id
        self.succs = [[] for _ in self.nodes]
        self.dep_counts = [0] * len(self.nodes)
        alive = {id(n) for n in self.nodes}
        for n in self.nodes:
            n.ctrl = [c for c in n.ctrl if id(c) in alive]   # edges to removed nodes go
            preds = {self.producer[s] for s in n.inputs if s in self.producer}
            preds |= {c.id for c in n.ctrl}
            preds.discard(n.id)
            for p in preds:
                self.succs[p].append(n.id)
            self.dep_counts[n.id] = len(preds)
        # slots dead after each node (program order; the concurrent path counts uses): dropping
        # them frees intermediates as TensorFlow's executor does, and a variable's read value
        # no longer alive lets TensorFlow update the variable in place instead of copying it
        keep = set(self.outputs) | set(self.inputs) | set(self.consts)
        last = {}
        self.uses = {}
        for n in self.nodes:
            for s in set(n.inputs):
                if s not in keep:
                    last[s] = n.id
                    self.uses[s] = self.uses.get(s, 0) + 1
        self.drops = [[] for _ in self.nodes]
        for s, i in last.items():
            self.drops[i].append(s)
        counts = {}
        for n in self.counted_nodes():
            if n.kind in ("kernel", "list"):
                counts.setdefault(n.op, [0, {}])[0] += 1
            elif n.kind == "fused":
                for op in n.fused_ops:
                    counts.setdefault(op, [0, {}])[0] += 1
            elif n.kind in ("stock", "reads"):
                r = counts.setdefault(n.op, [0, {}])[1]
                r[n.reason] = r.get(n.reason, 0) + (len(n.outputs) if n.kind == "reads" else 1)
        self.op_counts = counts
        return self

    def counted_nodes(self):
        """The nodes as the ledger counts them: the prologue first, a memo's, region's or
        TensorFlow group's inner nodes in its place."""
        yield from self.prologue
        for n in self.nodes:
            if n.kind in ("memo", "region") or "group" in n.attrs:
                yield from n.attrs["nodes"]
            else:
                yield n

    def dump(self):
        """Readable text form (TF_BACKEND_DUMP)."""
        def slot(s):
            spec = self.slot_specs.get(s)
            t = f"{spec.dtype.name}{fmt_shape(spec.shape)}" if spec is not None else "?"
            c = "=const" if s in self.consts else ""
            return f"%{s}:{t}{c}"

        lines = [f"program {self.name}  ({len(self.nodes)} nodes, {self.n_slots} slots)",
                 "  inputs: " + ", ".join(slot(s) for s in self.inputs)]
        for n in self.prologue:
            lines.append(f"  prologue: {', '.join(slot(s) for s in n.outputs)} = "
                         f"{n.kind}:{n.op}({', '.join(f'%{s}' for s in n.inputs)})  [{n.name}]")
        for n in self.nodes:
            extra = []
            if n.kind == "kernel" and n.kdef is not None:
                extra.append(n.kdef.name)
            if n.kind == "stock" and n.reason:
                extra.append(f"fallback:{n.reason}")
            if n.fused_ops:
                extra.append("fused[" + " -> ".join(n.fused_ops) + "]")
            if n.inplace is not None:
                extra.append(f"inplace:%{n.inputs[n.inplace]}")
            if n.ctrl:
                extra.append("after " + ",".join(f"#{c.id}" for c in n.ctrl))
            outs = ", ".join(slot(s) for s in n.outputs) or "-"
            ins = ", ".join(f"%{s}" for s in n.inputs)
            lines.append(f"  #{n.id:<3} {outs} = {n.kind}:{n.op}({ins})  "
                         f"[{n.name}] {' '.join(extra)}".rstrip())
            for i, sub in enumerate(n.subs):
                lines.extend("      " + l for l in sub.dump().splitlines())
            if n.kind in ("memo", "region") or "group" in n.attrs:
                for m in n.attrs["nodes"]:
                    mo = ", ".join(slot(s) for s in m.outputs)
                    mi = ", ".join(f"%{s}" for s in m.inputs)
                    lines.append(f"      {mo} = {m.kind}:{m.op}({mi})  [{m.name}]")
        lines.append("  outputs: " + ", ".join(f"%{s}" for s in self.outputs))
        for note in self.notes:
            lines.append(f"  # {note}")
        return "\n".join(lines)
