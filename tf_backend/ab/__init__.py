"""A/B comparison of stock TensorFlow and tf_backend: `tfb ab` (one target) and `tfb bench` (suite).

Modules: targets (what to run), arms (stock/ours x eager/tf.function/XLA), timing (alternating
rounds, medians, bootstrap), optimes (per-op-type times), compare (numerics), inprocess and
script (the two kinds of A/B run), schema (the JSON document), report (terminal), plot, bench.
"""
