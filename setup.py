"""tf_backend: a TFRT-style runtime for TensorFlow (numba on CPU, CuPy on GPU)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "tf_backend_startup.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithPth(build_py):
    """Put the start-up .pth file at the top of the wheel (site-packages)."""

    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH))


class EditableWheelWithPth(editable_wheel):
    """Editable installs get the .pth file too (setuptools' editable wheel skips build_py data)."""

    def _create_wheel_file(self, bdist_wheel):
        path = super()._create_wheel_file(bdist_wheel)
        import zipfile
        with zipfile.ZipFile(path, "a") as zf:
            zf.write(os.path.join(HERE, PTH), PTH)
        return path


setup(
    name="tf_backend",
    version="0.1.0",
    description="TFRT-style runtime for TensorFlow: set TF_BACKEND=1, run TensorFlow code unchanged",
    packages=["tf_backend", "tf_backend.ab", "tf_backend.devices", "tf_backend.program",
              "tf_backend.program.passes", "tf_backend.runtime", "kernels", "kernels.cpu",
              "kernels.gpu", "shape_fns"],
    python_requires=">=3.10",
    install_requires=["numpy>=1.26", "numba>=0.60", "absl-py", "threadpoolctl>=3"],
    extras_require={
        "cpu": ["tensorflow-cpu>=2.21,<2.22"],
        "gpu": ["cupy-cuda13x>=14"],
        "test": ["pytest>=8", "pytest-xdist", "matplotlib"],
        # what Keras' own test suites need beside TensorFlow (tfb conformance; WORKSPACE.md)
        "conformance": ["pytest>=8", "pytest-xdist", "scipy"],
    },
    entry_points={"console_scripts": ["tfb=tf_backend.cli:main"],
                  "pytest11": ["tf_backend = tf_backend.pytest_plugin"],
                  "tf_backend.devices": ["cpu = tf_backend.devices.cpu:CpuDevice",
                                         "cuda = tf_backend.devices.cuda:CudaDevice"]},
    cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth},
)
