"""Compiled loops split by rows: a loop whose every step treats the rows of its batch
independently runs as two half-batch loops, one per core, with no synchronisation between
iterations. TF-free.

A recurrent layer's loop (Keras' LSTM and GRU) carries a state of shape [batch, units] and reads
and writes list items of shape [batch, features]; every product reads the batch rows against
loop-invariant weights, every elementwise op and split works within a row. Rows 0..B/2-1 of
every result then depend only on rows 0..B/2-1 of every input: the loop is two independent
loops. Run by rows, each core runs the whole loop on its half, its products and its
elementwise ops alike, where the unsplit loop ran only its products two at a time (one per
core, `loop_helpers.mm2_*`) and its gates on one core.

`plan(loop)` decides, from the loop as data, what each value is in the two halves: WHOLE (the
same in both: counters, weights, constants), ROWS (its first axis, or its items' first axis for
a list, is the batch) or PARTIAL (a sum over the batch, as a backward loop accumulates a
weight's gradient x^T @ dz: each half sums its own rows, the halves' sums are added after the
loop). The rules are per step kind: an elementwise op is ROWS where an input is, every ROWS
input having the batch first and every other input broadcast along it; a product of ROWS by
WHOLE (not transposed) is ROWS, of ROWS by ROWS over the batch PARTIAL; a reshape keeping the
batch first; a reduction over other axes (over the batch: PARTIAL); adds and copies of partial
sums; list reads and writes with items of the list's kind; a data movement op (slice, split,
concat, ...) where its index map, computed by our kernel at full and at half batch, maps each
half's rows onto that half's rows the same way. Anything else that reads a split value
declines the split (the loop then runs whole, as before), and so does a condition that depends
on one.

`halved(loop, plan)` is the same loop at half the batch: the code generator
(kernels/cpu/loops.py) writes it as it writes any loop, with its products one at a time, as
`loop_fn(p, ...)`. `Rows` runs it: row views of ROWS arrays, ROWS lists as one buffer both
halves write ([capacity, 2, B/2, ...]: no copies in or out), half 1's accumulators from zero;
one half on a helper thread and one on the caller's, then the results joined. The halves run
one after the other where numba's thread count on the calling thread is one (a thread budget,
a multi-worker host): the same two half loops run either way, so the results do not depend on
the thread count.
"""
import collections
import os
import queue
import threading

import numpy as np

import kernels
from kernels.regions import Loop, Region, Step, Webs


# what a value is in the two halves
WHOLE = 0      # the same in both (counters, weights, constants)
ROWS = 1       # split: half p holds rows [p*B/2, (p+1)*B/2) of its first axis (of a list's items)
PARTIAL = 2    # summed over the batch: the whole value is half 0's plus half 1's (a weight's
               # gradient accumulated over a backward loop: x^T @ dz, a bias gradient)


class NoSplit(Exception):
    """Some step mixes rows; the message says which."""


class _Flip(NoSplit):
    """A loop variable is other than its first guess (a list of whole items, a state the body
    makes whole, an accumulator of partial sums): it takes that side (`slot`: a region input)."""

    def __init__(self, slot, label, why):
        super().__init__(why)
        self.slot, self.label = slot, label


def _rank_ok(t, B):
    return t[0] in "al" and len(t[2]) >= 1 and t[2][0] == B


def _can_be(label, t, B):
    if label == ROWS:
        return _rank_ok(t, B)
    if label == PARTIAL:
        return t[0] == "a" and np.dtype(t[1]).kind == "f"
    return True


def plan(loop, index_map):
    """(B, per loop variable its label, {"c": labels, "b": labels}) or None; labels map each
    slot of the region to WHOLE, ROWS or PARTIAL. `index_map(ctx, step)` is the generator's
    index-map function (kernels/cpu/loops.py)."""
    cands = collections.Counter(t[2][0] for t in loop.vars if t[0] in "al" and len(t[2]) >= 1)
    # arrays the body passes through unchanged (weights a loop was given) are whole first (a
    # list it passes through is a sequence it reads: split); then every variable by its shape
    same = [loop.body.outputs[k] == s and loop.vars[k][0] == "a"
            for k, s in enumerate(loop.body.inputs)]
    tries = []
    for B, _ in cands.most_common():
        if B >= 2 and not B % 2:
            tries += [(B, [ROWS if _rank_ok(t, B) and not p else WHOLE
                           for t, p in zip(loop.vars, same)]),
                      (B, [ROWS if _rank_ok(t, B) else WHOLE for t in loop.vars])]
    for B, split in tries:
        got = _labels(loop, B, split, index_map)
        if got is None:
            continue
        whole, total = _costs(loop.body, got["b"])
        if total >= WORK_MIN and whole <= WHOLE_MAX * total:
            return B, split, got
    return None


def _labels(loop, B, split, index_map):
    """The regions' labels for loop variables labelled `split` (changed in place where a
    variable's own steps say otherwise), or None."""
    where = {}
    for r in (loop.cond, loop.body):
        for k, s in enumerate(r.inputs):
            where[(id(r), s)] = k
    for _ in range(3 * len(split) + 1):
        if ROWS not in split:
            return None
        try:
            labels = {"c": _region(loop.cond, split, B, index_map),
                      "b": _region(loop.body, split, B, index_map)}
            if labels["c"].get(loop.cond.outputs[0], WHOLE) != WHOLE:
                return None   # the condition reads split values
            for k, s in enumerate(loop.body.outputs):
                got = labels["b"].get(s, WHOLE)
                if loop.vars[k][0] != "h" and got != split[k]:
                    raise _Flip(loop.body.inputs[k], got, f"loop variable {k} changes")
            return labels
        except _Flip as f:
            k = where.get((id(loop.body), f.slot), where.get((id(loop.cond), f.slot)))
            if k is None or split[k] == f.label or not _can_be(f.label, loop.vars[k], B):
                return None
            split[k] = f.label
        except NoSplit:
            return None
    return None


# the most of a body's work (elements made, products' multiply-adds) that may be whole: both
# halves do it (a loop whose only split values are a few counters would run twice)
WHOLE_MAX = 0.1
# the least work of one body run worth splitting: a handoff to the helper thread costs ~20-50 us,
# which a small body (a batch of 8 through 64 units: ~0.26M multiply-adds a step) pays back
# over a sequence; smaller bodies run whole
WORK_MIN = 1 << 18


def _costs(region, lab):
    """(work of whole steps, work of all steps) of a region."""
    whole = total = 0
    for st in region.steps:
        if st.kind in ("noop", "alias") or not st.outputs:
            continue
        t = st.types[0]
        n = int(np.prod(t[2], dtype=np.int64)) if t[0] in "al" else 0
        m = st.parts[0] if st.parts is not None else st
        if m.op == "MatMul" and st.inputs:
            a = region.types.get(st.inputs[0])
            if a is not None and a[0] == "a" and len(a[2]) == 2:
                n *= a[2][0] if m.attrs.get("transpose_a") else a[2][1]
        total += n
        if lab.get(st.outputs[0], WHOLE) == WHOLE:
            whole += n
    return whole, total


# ops whose result is a sum of their inputs: partial sums add to partial sums
_ADDS = {"AddV2", "Add", "AddN"}


def _uniform_rows(c, B):
    """A constant of B equal rows (zeros a gradient loop writes into a list): each half reads
    its first B/2 rows as its own."""
    a = np.ascontiguousarray(c)
    if a.ndim < 1 or a.shape[0] != B or a.dtype.kind == "O":
        return False
    b = a.reshape(B, -1).view(np.uint8) if a.size else a.reshape(B, 0)
    return bool((b == b[:1]).all())


def _region(region, split, B, index_map):
    lab = {s: ROWS for s, c in region.consts.items() if _uniform_rows(c, B)}
    lab.update({s: split[k] for k, s in enumerate(region.inputs)})
    inputs = set(region.inputs)
    types = region.types
    origin = {}   # an item read from a list the loop was given -> that list's slot

    def L(s):
        return lab.get(s, WHOLE)

    def mark(s, v, t=None):
        t = types[s] if t is None else t
        if not _can_be(v, t, B):
            raise NoSplit(f"%{s}: {t} cannot be {('whole', 'split', 'partial')[v]}")
        lab[s] = v

    def elementwise(op, ins, out_t):
        if any(L(s) == PARTIAL for s in ins):
            if op not in _ADDS:
                raise NoSplit(f"{op} of a partial sum")
            for s in ins:   # an accumulator the body adds partial sums to
                if L(s) != PARTIAL:
                    if s in inputs:
                        raise _Flip(s, PARTIAL, f"{op}: an accumulator of partial sums")
                    raise NoSplit(f"{op}: a partial sum and a value")
            return PARTIAL
        return _elementwise([(L(s), types[s]) for s in ins], out_t, B)

    for st in region.steps:
        if st.kind == "noop":
            continue
        if st.kind == "alias":
            for s, o in zip(st.inputs, st.outputs):
                lab[o] = L(s)
            continue
        if st.kind == "fused" and st.parts is not None:
            m, n, k = st.parts
            prod = _product(L(st.inputs[0]), L(st.inputs[1]), m.attrs)
            rest = st.inputs[len(m.inputs):]
            if prod == PARTIAL or any(L(s) == PARTIAL for s in rest):
                raise NoSplit(f"{st.op}: an epilogue of a partial sum")
            if prod != _elementwise([(L(s), types[s]) for s in rest] + [(prod, st.types[0])],
                                    st.types[0], B):
                raise NoSplit(f"{st.op}: a whole product with a split epilogue")
            mark(st.outputs[0], prod, st.types[0])
            continue
        if st.kind == "fused":
            steps = st.fusion[2] if st.fusion is not None else ()
            op = steps[0][0] if len(steps) == 1 else "a fused chain"
            mark(st.outputs[0], elementwise(op, st.inputs, st.types[0]), st.types[0])
            continue
        if st.op in ("TensorListGetItem", "TensorListPopBack") and st.inputs[0] in inputs:
            origin[st.outputs[-1]] = st.inputs[0]
        _kernel_step(st, L, mark, elementwise, region, B, index_map, origin)
    return lab


def _elementwise(ins, out_t, B):
    """ROWS or WHOLE for an elementwise result of (label, type) inputs (none partial)."""
    if not any(s == ROWS for s, _ in ins):
        return WHOLE
    shape = tuple(out_t[2])
    if len(shape) < 1 or shape[0] != B:
        raise NoSplit("an elementwise result without the batch first")
    for s, t in ins:
        sh = tuple(t[2]) if t[0] == "a" else ()
        if s == ROWS:
            if len(sh) != len(shape) or sh[0] != B:
                raise NoSplit("an elementwise input without the batch first")
        elif len(sh) == len(shape) and sh[0] != 1:
            raise NoSplit("a whole input of the batch's rank (it varies by row)")
    return ROWS


def _product(la, lb, attrs):
    """a @ b: rows of a by whole b are rows; a's rows against b's rows (a transposed) sum over
    the batch: partial."""
    ta, tb = bool(attrs.get("transpose_a")), bool(attrs.get("transpose_b"))
    if PARTIAL in (la, lb):
        raise NoSplit("a product of a partial sum")
    if la == ROWS and lb == ROWS and ta and not tb:
        return PARTIAL
    if lb == ROWS:
        raise NoSplit("a product whose right operand is split")
    if la == ROWS and ta:
        raise NoSplit("a product over the batch (transpose_a)")
    return la


def _kernel_step(st, L, mark, elementwise, region, B, index_map, origin):
    from kernels.cpu import loops as LP
    types = region.types
    op = st.op
    ins = [L(s) for s in st.inputs]
    if op == "MatMul":
        try:
            label = _product(ins[0], ins[1], st.attrs)
        except NoSplit:
            if ins[1] == ROWS and st.inputs[1] in origin:
                # weights a forward loop pushed, a copy an iteration: that list is whole
                raise _Flip(origin[st.inputs[1]], WHOLE, "a product's right operand from a list")
            raise
        mark(st.outputs[0], label, st.types[0])
    elif op in LP.LIST_OPS or (op == "AddN" and st.types[0][0] == "l"):
        if PARTIAL in ins:
            raise NoSplit(f"{op}: a partial sum into a list")
        _list_step(st, L, mark, B)
    elif op in LP.TABLE or op in ("SelectV2", "AddN"):
        mark(st.outputs[0], elementwise(op, st.inputs, st.types[0]), st.types[0])
    elif not any(ins):
        for s, t in zip(st.outputs, st.types):
            mark(s, WHOLE, t)
    elif op in LP.VIEWS:
        t = st.types[0]
        if any(ins[1:]):
            raise NoSplit(f"{op}: a split shape")
        if ins[0] == PARTIAL:
            mark(st.outputs[0], PARTIAL, t)
        elif len(t[2]) < 1 or t[2][0] != B:
            raise NoSplit(f"{op}: the batch moves")
        else:
            mark(st.outputs[0], ROWS, t)
    elif op in LP.REDUCE:
        if ins[0] == PARTIAL:
            raise NoSplit(f"{op} of a partial sum")
        nd = len(types[st.inputs[0]][2])
        if op == "BiasAddGrad":
            axes = set(range(nd - 1))
        else:
            c = region.consts.get(st.inputs[1])
            if c is None:
                raise NoSplit(f"{op}: axes not constant")
            axes = {int(a) % max(nd, 1) for a in np.asarray(c).reshape(-1)}
        if 0 not in axes:
            mark(st.outputs[0], ROWS, st.types[0])
        elif op == "Mean":
            raise NoSplit("Mean over the batch")
        else:   # a sum over the batch rows (and maybe more): each half sums its own
            mark(st.outputs[0], PARTIAL, st.types[0])
    elif op in LP.MOVEMENT:
        if PARTIAL in ins:   # copies elements (or zeros): linear in partial sums alone
            data = [k for k in range(len(st.inputs)) if k not in set(
                kernels.host_inputs(op, len(st.inputs)))]
            if any(ins[k] != PARTIAL for k in data):
                raise NoSplit(f"{op} of a partial sum and a value")
            for s, t in zip(st.outputs, st.types):
                mark(s, PARTIAL, t)
            return
        _movement(st, L, mark, region, B, index_map)
    else:
        raise NoSplit(f"{op}: no row rule")


def _half(t, H):
    """A split value's type in a half: H rows; a list's marked "rows" (its buffer holds both
    halves, [capacity, 2, H, ...]: kernels/cpu/loops.py)."""
    shape = (H,) + tuple(t[2][1:])
    return (t[0], t[1], shape, "rows") if t[0] == "l" else (t[0], t[1], shape)


class _Types:
    """What an index map reads of a region: slot types and constants."""

    def __init__(self, types, consts):
        self.types, self.consts = types, consts

    def type(self, slot):
        return self.types[slot]

    def const(self, slot):
        return self.consts.get(slot)


def _decode(data, m):
    """Per element of an index map: (which data input, the element's index in it), -1 for
    none."""
    k_of = np.full(m.shape, -1, np.int64)
    local = np.full(m.shape, -1, np.int64)
    for k, (off, n) in data.items():
        hit = (m >= off - 1) & (m < off - 1 + n)
        k_of[hit] = k
        local[hit] = m[hit] - (off - 1)
    return k_of, local


def _movement(st, L, mark, region, B, index_map):
    """A data movement op keeps rows apart when its index map at half the batch is, for
    each half, its index map at the whole batch (the split inputs' element numbers taken
    within the half)."""
    from kernels.regions import Ineligible
    try:
        data, maps = index_map(_Types(region.types, region.consts), st)
    except Ineligible as e:
        raise NoSplit(str(e)) from None
    split_ins = {k for k in data if L(st.inputs[k]) == ROWS}
    if not split_ins:
        for s, t in zip(st.outputs, st.types):
            mark(s, WHOLE, t)
        return
    for t in st.types:
        if not _rank_ok(t, B):
            raise NoSplit(f"{st.op}: an output without the batch first")
    H = B // 2
    htypes = dict(region.types)
    for k in split_ins:
        htypes[st.inputs[k]] = _half(region.types[st.inputs[k]], H)
    hst = Step(st.op, st.kind, st.attrs, st.inputs, st.outputs, [_half(t, H) for t in st.types],
               kfn=st.kfn)
    try:
        hdata, hmaps = index_map(_Types(htypes, region.consts), hst)
    except Ineligible as e:
        raise NoSplit(str(e)) from None
    for mf, mh in zip(maps, hmaps):
        mf, mh = mf.reshape(B, -1), mh.reshape(H, -1)
        want = _decode(hdata, mh)
        for p in (0, 1):
            k_of, local = _decode(data, mf[p * H:(p + 1) * H])
            for k in split_ins:
                rows = data[k][1] // B
                local = np.where(k_of == k, local - p * H * rows, local)
            if not (np.array_equal(k_of, want[0]) and np.array_equal(local, want[1])):
                raise NoSplit(f"{st.op}: its index map mixes rows")
    for s, t in zip(st.outputs, st.types):
        mark(s, ROWS, t)


def _list_step(st, L, mark, B):
    op = st.op
    if op == "TensorListGetItem":
        mark(st.outputs[0], L(st.inputs[0]), st.types[0])
    elif op in ("TensorListSetItem", "TensorListPushBack"):
        item = st.inputs[2 if op == "TensorListSetItem" else 1]
        if L(item) != L(st.inputs[0]):
            raise _Flip(st.inputs[0], L(item), f"{op}: an item and its list differ")
        mark(st.outputs[0], L(item), st.types[0])
    elif op == "TensorListPopBack":
        mark(st.outputs[0], L(st.inputs[0]), st.types[0])
        mark(st.outputs[1], L(st.inputs[0]), st.types[1])
    elif op == "TensorListReserve":
        mark(st.outputs[0], ROWS if _rank_ok(st.types[0], B) else WHOLE, st.types[0])
    elif op in ("TensorListLength", "TensorListElementShape"):   # the whole list's
        mark(st.outputs[0], WHOLE, st.types[0])
    elif op == "AddN":   # acc[i] += v on split lists (the generator declines other forms)
        ls = {L(s) for s in st.inputs}
        if len(ls) != 1:
            raise NoSplit("AddN of split and whole lists")
        mark(st.outputs[0], ls.pop(), st.types[0])
    elif L(st.inputs[0]) == ROWS:   # Stack: the items' axis first
        raise NoSplit(f"{op} of a split list")
    else:
        for s, t in zip(st.outputs, st.types):
            mark(s, WHOLE, t)


_READS = {"TensorListGetItem", "TensorListPopBack", "TensorListStack", "AddN"}


def write_only(loop, split):
    """{region id: slots} of whole lists the loop writes but never reads items of (the weights
    a forward loop pushes for its gradient, once an iteration): half 0 writes them, half 1 only
    counts (both would write the same values), and the two share one buffer."""
    webs = Webs()
    find, union = webs.find, webs.union

    read = set()
    regions = (loop.cond, loop.body)
    for r in regions:
        for k, s in enumerate(r.inputs):
            union((id(r), s), ("v", k))
        if r is loop.body:
            for k, s in enumerate(r.outputs):
                union((id(r), s), ("v", k))
        for st in r.steps:
            lists = [x for x in st.inputs + st.outputs if r.types.get(x, ("a",))[0] == "l"]
            for x in lists[1:]:
                union((id(r), x), (id(r), lists[0]))
            if st.op in _READS and lists:
                read.add((id(r), lists[0]))
    read = {find(x) for x in read}
    out = {}
    for k, t in enumerate(loop.vars):
        if t[0] == "l" and split[k] == WHOLE and find(("v", k)) not in read:
            root = find(("v", k))
            for r in regions:
                out.setdefault(id(r), set()).update(
                    s for s, tt in r.types.items() if tt[0] == "l" and find((id(r), s)) == root)
    return out


def halved(loop, sp):
    """The loop at half the batch: split values' types with B/2 rows; whole lists half 1 does
    not write marked "first"."""
    B, split, labels = sp
    H = B // 2
    first = write_only(loop, split)

    def typ(t, s, slot=None, r=None):
        if s == ROWS:
            return _half(t, H)
        if t[0] == "l" and r is not None and slot in first.get(id(r), ()):
            return (t[0], t[1], tuple(t[2]), "first")
        return t

    def step(st, lab, r):
        parts = st.parts
        if parts is not None:
            m, n, k = parts
            s = lab.get(st.outputs[0], WHOLE)
            parts = (step(m, {o: s for o in m.outputs}, r), step(n, lab, r), k)
        return Step(st.op, st.kind, st.attrs, st.inputs, st.outputs,
                    [typ(t, lab.get(o, WHOLE), o, r) for t, o in zip(st.types, st.outputs)],
                    fusion=st.fusion, parts=parts, kfn=st.kfn)

    def region(r, lab):
        types = {s: typ(t, lab.get(s, WHOLE), s, r) for s, t in r.types.items()}
        consts = {s: (np.ascontiguousarray(c)[:H] if lab.get(s) == ROWS else c)
                  for s, c in r.consts.items()}
        return Region(r.inputs, [step(st, lab, r) for st in r.steps], r.outputs, consts, types,
                      r.pre)

    return Loop(loop.name, [typ(t, s, loop.body.inputs[k], loop.body)
                            for k, (t, s) in enumerate(zip(loop.vars, split))],
                region(loop.cond, labels["c"]), region(loop.body, labels["b"]))


class Rows:
    """A half-batch loop function, `fn(p, ...)`, run on both halves of the loop's inputs; called
    as the whole loop's function is (loop variables, lists as buffer and length, then invariant
    reads and constants) and returning what it returns. A split array reaches half p as its
    rows [p*H, (p+1)*H) (a view); a split list as its buffer seen as [capacity, 2, H, ...],
    each half reading and writing items [i, p] of the one buffer, so lists are neither copied
    in nor joined after (unless a half had to grow or copy its buffer: then half 1's rows are
    copied into half 0's). Other attributes are the half function's (numba's dispatcher)."""

    def __init__(self, fn, var_types, split, B, written, half_types=None):
        self._fn = fn
        self._B, self._H = B, B // 2
        if half_types is not None:   # lists only half 0 writes: one buffer for both
            written = [w and not (len(h) > 3 and h[3] == "first")
                       for w, h in zip(written, half_types)]
        # the arguments each half gets otherwise than the whole loop's, by what they are:
        # positions in the argument list (a list is its buffer, then its length)
        self._rows_a, self._part_a, self._rows_l, self._own_l = [], [], [], []
        j = 0
        for t, s, w in zip(var_types, split, written):
            if t[0] == "a":
                if s == ROWS:
                    self._rows_a.append(j)
                elif s == PARTIAL:
                    self._part_a.append(j)
                j += 1
            elif t[0] == "l":
                if s == ROWS:
                    self._rows_l.append(j)
                elif w:   # a whole list both halves write: one each
                    self._own_l.append(j)
                j += 2

    def __getattr__(self, name):
        return getattr(self._fn, name)

    def _half(self, args, p):
        H = self._H
        out = list(args)
        for j in self._rows_a:
            out[j] = args[j][p * H:(p + 1) * H]
        for j in self._rows_l:
            a = args[j]
            out[j] = np.ascontiguousarray(a).reshape((a.shape[0], 2, H) + a.shape[2:])
        if p:
            for j in self._part_a:   # half 1 sums from zero
                out[j] = np.zeros_like(args[j])
            for j in self._own_l:
                out[j] = args[j].copy()
        out.insert(0, np.int64(p))
        return out

    def arg_types(self, args):
        """numba's types of the half function's arguments for the whole loop's `args`."""
        import numba
        return tuple(numba.typeof(a) for a in self._half(args, 0))

    def __call__(self, *args):
        halves = self._half(args, 0), self._half(args, 1)
        r0, r1 = _both(self._fn, halves)
        if r0[-1] != r1[-1]:
            raise RuntimeError("split loop: the halves ran different trip counts")
        out = list(r0)
        for j in self._rows_a:
            out[j] = np.concatenate((r0[j], r1[j]))
        for j in self._part_a:
            out[j] = np.add(r0[j], r1[j])
        for j in self._rows_l:
            a, b, n = r0[j], r1[j], int(r0[j + 1])
            if n != int(r1[j + 1]):
                raise RuntimeError("split loop: the halves' lists differ in length")
            if not np.may_share_memory(a, b):   # a half grew or copied its buffer
                a[:n, 1] = b[:n, 1]
            out[j] = a.reshape((a.shape[0], self._B) + a.shape[3:])
        return tuple(out)


_helper = {"thread": None, "jobs": queue.SimpleQueue(), "done": queue.SimpleQueue()}
_helper_lock = threading.Lock()   # one pair of halves at a time on the helper
_start_lock = threading.Lock()


def _after_fork():
    """A forked child has no helper thread (only the forking thread survives a fork): it starts
    its own, with fresh queues and locks, at its first split loop."""
    global _helper_lock, _start_lock
    _helper.update(thread=None, jobs=queue.SimpleQueue(), done=queue.SimpleQueue())
    _helper_lock, _start_lock = threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _work():
    jobs, done = _helper["jobs"], _helper["done"]
    while True:
        fn, args = jobs.get()
        try:
            done.put((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            done.put((False, e))


def _parallel():
    """Whether this thread may use a second core: numba's count on it (the executor's thread
    budget sets it to one beside another heavy node, and on a host shared by workers)."""
    import numba
    try:
        return numba.get_num_threads() >= 2
    except Exception:  # noqa: BLE001 - numba's threading layer unavailable
        return False


def _both(fn, halves):
    """fn on both halves: the second on the helper thread while the caller runs the first
    (numba releases the GIL in the loop functions: nogil), else one after the other."""
    if not _parallel() or not _helper_lock.acquire(blocking=False):
        return fn(*halves[0]), fn(*halves[1])
    try:
        if _helper["thread"] is None:
            with _start_lock:
                if _helper["thread"] is None:
                    t = threading.Thread(target=_work, daemon=True,
                                         name="tf_backend-loop-rows")
                    t.start()
                    _helper["thread"] = t
        _helper["jobs"].put((fn, halves[1]))
        try:
            r0 = fn(*halves[0])
        finally:
            ok, r1 = _helper["done"].get()
        if not ok:
            raise r1
        return r0, r1
    finally:
        _helper_lock.release()
