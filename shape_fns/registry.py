"""One registry of shape functions keyed by TensorFlow op type."""

SHAPE_FNS = {}
VALUE_FREE = set()   # ops whose output specs depend only on input shapes/dtypes and attrs


def shape_fn(*op_types, value_free=False):
    """Register `fn(inputs: list[Spec], attrs: dict) -> list[Spec]` for op types.

    value_free=True promises the fn never reads `Spec.value`, so callers may cache its result
    per (attrs, input shapes).
    """

    def register(fn):
        for op in op_types:
            if op in SHAPE_FNS:
                raise KeyError(f"shape fn for {op} registered twice")
            SHAPE_FNS[op] = fn
            if value_free:
                VALUE_FREE.add(op)
        return fn

    return register


def get(op_type):
    return SHAPE_FNS.get(op_type)
