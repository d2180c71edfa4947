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
