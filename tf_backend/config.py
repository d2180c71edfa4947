"""Modes and environment variables; pure Python (imported at interpreter start-up)."""
import os

MODES = ("off", "on", "strict", "shadow")
_ALIASES = {"": "off", "0": "off", "off": "off", "false": "off", "no": "off",
            "1": "on", "on": "on", "true": "on", "yes": "on", "strict": "strict",
            "shadow": "shadow"}


def parse_mode(value):
    """Map a TF_BACKEND value to a mode; unknown values raise ValueError."""
    if value is None:
        return "off"
    key = str(value).strip().lower()
    if key not in _ALIASES:
        raise ValueError(
            f"TF_BACKEND={value!r} is not a valid value: use unset/0/off, 1/on, strict or shadow")
    return _ALIASES[key]


def env_mode():
    return parse_mode(os.environ.get("TF_BACKEND"))


def env_force():
    return os.environ.get("TF_BACKEND_FORCE", "").strip().lower() in ("1", "on", "true", "yes")


LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


def local_workers(tf_config=None):
    """How many tasks of a tf.distribute cluster (TF_CONFIG) share this host, counting this
    one: 1 outside a cluster or when this task's address is not this host's. Their kernels
    share the cores: numba's parallel loops and the GEMM team wait for every thread of their
    team, so oversubscribed workers stall each other."""
    import json
    import socket
    raw = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
    try:
        cfg = json.loads(raw) if raw else {}
        cluster, task = cfg.get("cluster") or {}, cfg.get("task") or {}
        own = cluster[task["type"]][int(task["index"])]
    except (ValueError, KeyError, IndexError, TypeError):
        return 1
    names = set(LOCAL_HOSTS)
    try:
        names.update({socket.gethostname(), socket.getfqdn()})
    except OSError:
        pass

    def host(addr):
        return str(addr).rsplit(":", 1)[0]
    if host(own) not in names:
        return 1
    return max(1, sum(host(a) in names for tasks in cluster.values()
                      if isinstance(tasks, (list, tuple)) for a in tasks))
