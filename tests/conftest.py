import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# compiled loops compile on their first run, not in a background thread (tests/
# test_compiled_loops.py covers the background path): results do not depend on timing
os.environ.setdefault("TF_BACKEND_LOOP_COMPILE", "sync")
# kernels compile on their first call too, not in a child while TensorFlow's kernel runs it
# (tests/test_deferred_compiles.py covers that path): the first call tests our kernel
os.environ.setdefault("TF_BACKEND_KERNEL_COMPILE", "sync")
# compiled functions stay on our executor (tests/test_function_choice.py covers the choice)
os.environ.setdefault("TF_BACKEND_FUNCTION_CHOICE", "off")
# eager view ops (Reshape, Identity...) run on our kernels, which the op table checks against
# stock (tests/test_interception.py covers handing them to TensorFlow, the default)
os.environ.setdefault("TF_BACKEND_EAGER_VIEWS", "ours")
# product kernel choices measured here (two workers loading each other) are not kept on disk
os.environ.setdefault("TF_BACKEND_GEMM_RECORD", "0")

import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running suites, not in the default CI run")


# Modules whose tests run for tens of seconds each on a cold cache (Keras fits, compiled
# recurrent loops, subprocess runs of pytest, pip and several workers), run first, so that the
# last tests a worker runs are short ones. It needs pytest.ini's `--dist worksteal`: under
# xdist's default `load`, which hands each worker a run of consecutive tests, one worker got
# every heavy module and the cold run took 17:47 against 15:40 in alphabetical order.
HEAVY_FIRST = ("test_zoo.py", "test_compiled_loops.py", "test_loop_split.py", "test_cli_ab.py",
               "test_pytest_plugin.py", "test_multiworker.py", "test_install.py",
               "test_autotune.py")


def pytest_collection_modifyitems(config, items):
    """Heavy modules first (HEAVY_FIRST, in collection order); `slow` tests run only when
    selected by marker (`-m slow`)."""
    items.sort(key=lambda item: item.path.name not in HEAVY_FIRST)
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tf():
    import tensorflow
    return tensorflow


@pytest.fixture
def backend(tf):
    """The backend enabled (mode "on") with a clean ledger; disabled afterwards."""
    import tf_backend
    assert tf_backend.enable("on")
    tf_backend.reset_stats()
    yield tf_backend
    tf_backend.disable()
