"""Compiled regions as data: what a program pass hands a device's code generator (TF-free).

A `Loop` is a While whose condition and body a device may compile into one function
(kernels/cpu/loops.py on the CPU); tf_backend/program/passes/compile_loops.py builds it from the
While's sub-programs. Steps name ops, attrs and slots; they hold no callables but our kernel's
function for data movement ops (the generator runs it on element numbers at build time).
"""


class Ineligible(Exception):
    """A region has something without an inline form; the message says what."""


class Step:
    """One node of a condition or body, as data."""
    __slots__ = ("op", "kind", "attrs", "inputs", "outputs", "types", "fusion", "parts", "kfn")

    def __init__(self, op, kind, attrs, inputs, outputs, types, fusion=None, parts=None,
                 kfn=None):
        self.op, self.kind, self.attrs = op, kind, attrs
        self.inputs, self.outputs, self.types = list(inputs), list(outputs), list(types)
        self.fusion = fusion    # fused elementwise: (dtype, n_inputs, steps) (kernels/cpu/fusion)
        self.parts = parts      # producer + epilogue: (producer Step, epilogue Step, input index)
        self.kfn = kfn          # our CPU kernel fn (data movement ops: index maps at build time)


class Region:
    """A condition or body: its input slots (the loop variables, in order), steps, output
    slots, constants (slot -> host value) and the type of every slot it uses."""
    __slots__ = ("inputs", "steps", "outputs", "consts", "types", "pre")

    def __init__(self, inputs, steps, outputs, consts, types, pre=()):
        self.inputs, self.steps, self.outputs = list(inputs), list(steps), list(outputs)
        self.consts, self.types, self.pre = consts, types, list(pre)
        # pre: slots computed before the loop by the caller (loop-invariant variable reads)


class Loop:
    """vars: the loop variables' types; cond and body: Regions. A type is ("a", dtype, shape)
    (shape () for scalars), ("l", dtype, element shape) or ("h",): a handle the loop passes
    through unchanged (variables; read before the loop by the caller)."""
    __slots__ = ("name", "vars", "cond", "body")

    def __init__(self, name, vars, cond, body):
        self.name, self.vars, self.cond, self.body = name, list(vars), cond, body


class Webs:
    """Union-find over hashable keys (list values that share a buffer, through list ops, aliases
    and loop variables)."""
    __slots__ = ("parent",)

    def __init__(self):
        self.parent = {}

    def find(self, x):
        parent = self.parent
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)
