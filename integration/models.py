"""Bundled Keras models (random weights, no downloads): the one home is tf_backend/zoo.py, so the
installed CLI can build them too; integration code imports them from here."""
from tf_backend.zoo import BUILDERS, build, cnn, mlp, sample_batch, small_cnn, small_mlp  # noqa: F401
