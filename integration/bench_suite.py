"""Standing A/B workloads, stock TensorFlow vs tf_backend: a thin runner for `tfb bench`.

The suite lives in tf_backend/ab/bench.py so that the installed `tfb bench` finds it.
Usage: python integration/bench_suite.py [--quick] [--only gemm] [--json out.json] [--plot p.png]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tf_backend.ab import bench  # noqa: E402

if __name__ == "__main__":
    sys.exit(bench.main())
