"""The backend follows a replaced eager context (`context._reset_context()`, which Keras' own
nn_test calls before configuring logical devices): ops we hand to TensorFlow, and the batched
variable readers, run in the current context, not through the old context's handle."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.eager import context
    import tf_backend

    tf_backend.enable("on")
    a = tf.Variable(np.ones((2, 2), np.float32))
    tf.function(lambda: a + 1.0)()          # runs TensorFlow ops through the current context
    context._reset_context()

    v = tf.Variable(np.zeros((3, 4), np.float32))
    w = tf.Variable(np.full((3, 4), 2.0, np.float32))

    @tf.function
    def step():
        v.assign(tf.ones((3, 4)) * 3.0)     # AssignVariableOp runs on TensorFlow's kernel
        return v.read_value()

    got = step().numpy()
    assert got.shape == (3, 4) and (got == 3.0).all(), got
    assert (v.numpy() == 3.0).all(), v.numpy()
    got = tf.function(lambda: v + w)().numpy()   # inference program: batched reads
    assert (got == 5.0).all(), got
    print("OK")
""")


def test_backend_follows_a_reset_eager_context():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_BACKEND", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-3000:]
