"""Programs: tf.function graphs lowered to our IR, optimised by passes, run by the executor."""
