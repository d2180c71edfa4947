"""Run Python code in a subprocess where importing TensorFlow (or Keras) fails."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BLOCK = '''
import importlib.abc, sys
class _NoTF(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("tensorflow", "keras", "tf_keras")):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, _NoTF())
'''

CHECK = '''
loaded = sorted(m for m in sys.modules if m.startswith(("tensorflow", "keras", "tf_keras")))
assert not loaded, loaded
'''


def run(code, extra_path=(), timeout=240):
    """Run `code` with TensorFlow blocked; returns the JSON it prints on its last line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, ROOT, env.get("PYTHONPATH", "")])
    env.pop("TF_BACKEND", None)
    r = subprocess.run([sys.executable, "-c", BLOCK + code + CHECK], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
