"""One registry of shape functions keyed by TensorFlow op type."""

SHAPE_FNS = {}


def shape_fn(*op_types):
    """Register `fn(inputs: list[Spec], attrs: dict) -> list[Spec]` for op types."""

    def register(fn):
        for op in op_types:
            if op in SHAPE_FNS:
                raise KeyError(f"shape fn for {op} registered twice")
            SHAPE_FNS[op] = fn
        return fn

    return register


def get(op_type):
    return SHAPE_FNS.get(op_type)
