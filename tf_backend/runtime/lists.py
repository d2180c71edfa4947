"""TensorLists on the host runtime: TensorFlow's list ops (TensorArray, while_v2's gradient
accumulators) on a plain Python list of device buffers, inside programs. TensorFlow-free.

A list value is immutable, as TensorFlow's variant is to its readers: SetItem copies the list of
references (not the buffers); PushBack appends in place only when the list it extends is the
newest one over its store (no one has pushed past it), else it copies. Items are stored and
handed out read-only, so no in-place kernel writes through them. Unset items (Reserve) read as
zeros of the element shape.
"""
import numpy as np

from shape_fns.errors import InvalidArgumentError

from ..alloc import empty as _empty


class HostList:
    # packed: a buffer [>= n, *element] whose first n items are this list's items (a compiled
    # loop's output, kernels/cpu/loops.py), so the next loop takes it without stacking them;
    # store None: the items are made from it when first asked for (a list a compiled loop
    # makes and the next one reads never needs them one by one)
    __slots__ = ("_store", "n", "dtype", "shape", "max", "packed")

    def __init__(self, store, n, dtype, shape, max_n=-1, packed=None):
        self._store, self.n, self.dtype, self.shape, self.max = store, n, dtype, shape, max_n
        self.packed = packed

    @property
    def store(self):
        s = self._store
        if s is None:
            items = self.packed[:self.n].view()
            items.flags.writeable = False
            s = self._store = list(items) if items.ndim > 1 else [
                items[i:i + 1].reshape(()) for i in range(self.n)]
        return s

    def items(self):
        return self.store[:self.n] if len(self.store) != self.n else self.store

    def __repr__(self):
        return f"<HostList {self.dtype.name}{self.shape} x{self.n}>"


def _ro(a, dtype):
    a = np.asarray(a)
    if a.dtype != dtype:
        raise InvalidArgumentError(f"Invalid data types; op elements {a.dtype.name} but list "
                                   f"elements {dtype.name}")
    v = a.view()
    v.flags.writeable = False
    return v


def _shape_arg(v):
    """An element_shape input: None (unknown rank) or a tuple with None for unknown dims."""
    a = np.asarray(v)
    if a.ndim == 0:
        return None if int(a) == -1 else ()
    return tuple(None if int(d) < 0 else int(d) for d in a.reshape(-1))


def _merge(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if len(a) != len(b):
        raise InvalidArgumentError(f"Incompatible ranks during merge: {len(a)} vs. {len(b)}")
    out = []
    for x, y in zip(a, b):
        if x is not None and y is not None and x != y:
            raise InvalidArgumentError(f"Incompatible shapes during merge: {list(a)} vs. "
                                       f"{list(b)}")
        out.append(x if x is not None else y)
    return tuple(out)


def _check_item(lst, a):
    shape = lst.shape
    if shape is not None and (len(shape) != a.ndim or any(
            d is not None and d != n for d, n in zip(shape, a.shape))):
        raise InvalidArgumentError(
            f"Tried to set a tensor with incompatible shape at a list index. Item element "
            f"shape: {list(a.shape)} list shape: {[-1 if d is None else d for d in shape]}")


def _zeros(lst, shape_in, what):
    shape = _merge(lst.shape, shape_in)
    if shape is None or any(d is None for d in shape):
        for it in lst.items():   # TensorFlow falls back on a set item's shape
            if it is not None:
                shape = it.shape
                break
        else:
            raise InvalidArgumentError(
                f"Trying to read an uninitialized tensor but element_shape is not fully "
                f"defined: {'<unknown>' if shape is None else list(shape)} ({what})")
    z = np.zeros(shape, lst.dtype)
    z.flags.writeable = False
    return z


def empty_list(ins, attrs):
    shape, max_n = ins
    return [HostList([], 0, attrs["element_dtype"], _shape_arg(shape), int(max_n))]


def reserve(ins, attrs):
    shape, n = ins
    n = int(n)
    if n < 0:
        raise InvalidArgumentError(f"The num_elements to reserve must be a non negative number, "
                                   f"but got {n}")
    return [HostList([None] * n, n, attrs["element_dtype"], _shape_arg(shape))]


def from_tensor(ins, attrs):
    t, shape = ins
    t = np.asarray(t)
    if t.ndim < 1:
        raise InvalidArgumentError("Tensor must be at least a vector, but saw shape: []")
    dt = attrs["element_dtype"]
    shape = _merge(_shape_arg(shape), t.shape[1:])
    if t.dtype == dt and t.flags.c_contiguous and t.ndim > 1:
        packed = t.view()
        packed.flags.writeable = False
        return [HostList(None, t.shape[0], dt, shape, packed=packed)]
    items = [_ro(t[i], dt) for i in range(t.shape[0])]
    return [HostList(items, len(items), dt, shape)]


def push_back(ins, attrs):
    lst, t = ins
    a = _ro(t, lst.dtype)
    _check_item(lst, a)
    if 0 <= lst.max <= lst.n:
        raise InvalidArgumentError(f"Tried to push item into a full list list size: {lst.n} "
                                   f"max_num_elements: {lst.max}")
    store = lst.store
    if len(store) == lst.n:
        store.append(a)           # the newest list over this store: extend it
    else:
        store = store[:lst.n] + [a]
    return [HostList(store, lst.n + 1, lst.dtype, lst.shape, lst.max)]


def pop_back(ins, attrs):
    lst, shape = ins
    if lst.n == 0:
        raise InvalidArgumentError("Trying to pop from an empty list.")
    item = lst.store[lst.n - 1]
    if item is None:
        item = _zeros(lst, _shape_arg(shape), "TensorListPopBack")
    return [HostList(lst.store, lst.n - 1, lst.dtype, lst.shape, lst.max), item]


def set_item(ins, attrs):
    lst, index, item = ins
    i = int(index)
    items = list(lst.items())
    if i < 0 or i >= len(items):
        if not attrs.get("resize_if_index_out_of_bounds", False) or i < 0:
            raise InvalidArgumentError(f"Trying to modify element {i} in a list with "
                                       f"{len(items)} elements.")
        items += [None] * (i + 1 - len(items))
    a = _ro(item, lst.dtype)
    _check_item(lst, a)
    items[i] = a
    return [HostList(items, len(items), lst.dtype, lst.shape, lst.max)]


def get_item(ins, attrs):
    lst, index, shape = ins
    i = int(index)
    if i < 0 or i >= lst.n:
        raise InvalidArgumentError(f"Trying to access element {i} in a list with {lst.n} "
                                   f"elements.")
    item = lst.store[i]
    if item is None:
        item = _zeros(lst, _shape_arg(shape), "TensorListGetItem")
    return [item]


def stack(ins, attrs):
    lst, shape = ins
    n = lst.n
    want = attrs.get("num_elements", -1)
    if want not in (-1, None) and want != n:
        raise InvalidArgumentError(f"Operation expected a list with {want} elements but got a "
                                   f"list with {n} elements.")
    p = lst.packed
    if p is not None and p.shape[0] >= n and n:   # a compiled loop's buffer, a tensor's rows
        out = p[:n].view()   # its items, as they are: read-only (no one writes a list's
        out.flags.writeable = False   # buffer in place; nor, then, through this)
        return [out]
    items = lst.items()
    if not items:
        z = _zeros(lst, _shape_arg(shape), "TensorListStack")
        return [np.zeros((0,) + z.shape, lst.dtype)]
    zero = None
    if any(it is None for it in items):
        zero = _zeros(lst, _shape_arg(shape), "TensorListStack")
    first = zero if items[0] is None else items[0]
    out = _empty((len(items),) + first.shape, first.dtype)
    return [np.stack([zero if it is None else it for it in items], out=out)]


def length(ins, attrs):
    return [np.array(ins[0].n, np.int32)]


def element_shape(ins, attrs):
    shape = ins[0].shape
    dt = attrs.get("shape_type", np.dtype(np.int32))
    if shape is None:
        return [np.array(-1, dt)]
    return [np.array([-1 if d is None else d for d in shape], dt)]


def add(ins, attrs):
    """AddN over lists (gradient aggregation): item by item, an unset item counting as zeros."""
    first = ins[0]
    out = list(first.items())
    for lst in ins[1:]:
        items = lst.items()
        if len(items) != len(out):
            raise InvalidArgumentError(f"Trying to add two lists of tensors with different "
                                       f"lengths. One is {len(out)} and the other is "
                                       f"{len(items)}")
        for i, b in enumerate(items):
            a = out[i]
            if b is None:
                continue
            if a is None:
                out[i] = b
                continue
            if a.shape != b.shape:
                raise InvalidArgumentError(f"Trying to add two tensors with incompatible element "
                                           f"shapes. One is {list(a.shape)} and the other is "
                                           f"{list(b.shape)}")
            with np.errstate(all="ignore"):
                s = np.asarray(np.add(a, b, dtype=first.dtype))
            s.flags.writeable = False
            out[i] = s
    return [HostList(out, len(out), first.dtype, first.shape, first.max)]


def zeros_like(ins, attrs):
    """ZerosLike of a list: the same length, each set item's zeros (unset items stay unset)."""
    lst = ins[0]
    out = []
    for it in lst.items():
        if it is not None:
            it = np.zeros(it.shape, it.dtype)
            it.flags.writeable = False
        out.append(it)
    return [HostList(out, len(out), lst.dtype, lst.shape, lst.max)]


# ops whose inputs and outputs are all lists when their output is a variant
ON_LISTS = {"AddN": add, "ZerosLike": zeros_like}

# op -> (function, positions of list inputs, positions of list outputs)
OPS = {
    "EmptyTensorList": (empty_list, (), (0,)),
    "TensorListReserve": (reserve, (), (0,)),
    "TensorListFromTensor": (from_tensor, (), (0,)),
    "TensorListPushBack": (push_back, (0,), (0,)),
    "TensorListPopBack": (pop_back, (0,), (0,)),
    "TensorListSetItem": (set_item, (0,), (0,)),
    "TensorListGetItem": (get_item, (0,), ()),
    "TensorListStack": (stack, (0,), ()),
    "TensorListLength": (length, (0,), ()),
    "TensorListElementShape": (element_shape, (0,), ()),
}
