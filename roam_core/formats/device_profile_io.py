"""Device profiles by name or file: the published ones and those ``roam calibrate`` measured.

A profile name is one of :data:`~roam_core.model.device_profiles.BUILTIN_PROFILES`
(``a100-80g``, ``h100-sxm``, ``h200``), a measured one (``cpu``, ``cuda``: the JSON file
``roam calibrate`` wrote in :func:`profile_dir`), or the path of such a JSON file.

File format (``format: "roam-device-profile"``, ``schema_version`` 1)::

    {"format": "roam-device-profile", "schema_version": 1, "name": "cpu",
     "description": "...", "matmul_flops_per_s": {"float32": 1.1e11, ...},
     "vector_flops_per_s": 1.1e11, "memory_bandwidth_bytes_per_s": 9.8e9,
     "launch_overhead_s": 4e-6, "efficiency": {"elementwise": 0.7, ...},
     "memory_bytes": 0, "conv_uses_tf32": false, "source": "...",
     "calibrated": {"device": "cpu", "threads": 2, ...},
     "conv_flops_per_s": {"float32": 6.0e10}, "attention_flops_per_s": {"float32": 4.0e10}}

``conv_flops_per_s`` and ``attention_flops_per_s`` are optional (empty: the matmul rates), as
are the ``efficiency`` keys (``norm`` and ``batch_norm`` default to ``elementwise``), so files
written before those fields existed load and price as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from roam_core.base.errors import ConfigError
from roam_core.model.cost_model import DeviceProfile
from roam_core.model.device_profiles import BUILTIN_PROFILES, MEASURED_PROFILES

__all__ = ["PROFILE_SCHEMA_VERSION", "known_profiles", "load_profile_file", "profile_dir",
           "profile_from_dict", "profile_path", "profile_to_dict", "resolve_profile",
           "save_profile"]

PROFILE_SCHEMA_VERSION = 1
_FORMAT = "roam-device-profile"


def profile_dir() -> Path:
    """Where measured profiles live: ``$ROAM_CACHE_DIR/device_profiles``, else
    ``$XDG_CACHE_HOME/roam/device_profiles``, else ``~/.cache/roam/device_profiles``."""
    root = os.environ.get("ROAM_CACHE_DIR")
    if root:
        return Path(root) / "device_profiles"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "roam" / "device_profiles"


def profile_path(name: str) -> Path:
    """The file a measured profile ``name`` is stored in."""
    return profile_dir() / f"{name}.json"


def known_profiles() -> tuple[str, ...]:
    """The names :func:`resolve_profile` accepts (a JSON path is accepted too)."""
    return (*BUILTIN_PROFILES, *MEASURED_PROFILES)


def profile_to_dict(p: DeviceProfile) -> dict[str, Any]:
    """Plain-JSON dict of a profile (the inverse of :func:`profile_from_dict`)."""
    return {"format": _FORMAT, "schema_version": PROFILE_SCHEMA_VERSION, "name": p.name,
            "description": p.description,
            "matmul_flops_per_s": {k: float(v) for k, v in p.matmul_flops_per_s.items()},
            "vector_flops_per_s": float(p.vector_flops_per_s),
            "memory_bandwidth_bytes_per_s": float(p.memory_bandwidth_bytes_per_s),
            "launch_overhead_s": float(p.launch_overhead_s),
            "efficiency": {k: float(v) for k, v in p.efficiency.items()},
            "memory_bytes": int(p.memory_bytes), "conv_uses_tf32": bool(p.conv_uses_tf32),
            "source": p.source, "calibrated": dict(p.calibrated),
            "conv_flops_per_s": {k: float(v) for k, v in p.conv_flops_per_s.items()},
            "attention_flops_per_s": {k: float(v)
                                      for k, v in p.attention_flops_per_s.items()}}


def profile_from_dict(obj: Any, where: str = "device profile") -> DeviceProfile:
    """Build a :class:`DeviceProfile` from a parsed JSON object.

    Raises
    ------
    ConfigError
        Wrong format or version, a missing or mistyped field (named).
    """
    if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
        raise ConfigError(f"{where}: not a roam device profile (format {_FORMAT!r})")
    if obj.get("schema_version") != PROFILE_SCHEMA_VERSION:
        raise ConfigError(f"{where}: schema_version {obj.get('schema_version')!r}, this roam "
                          f"reads {PROFILE_SCHEMA_VERSION}")
    try:
        return DeviceProfile(
            name=str(obj["name"]), description=str(obj.get("description", "")),
            matmul_flops_per_s={str(k): float(v) for k, v in obj["matmul_flops_per_s"].items()},
            vector_flops_per_s=float(obj["vector_flops_per_s"]),
            memory_bandwidth_bytes_per_s=float(obj["memory_bandwidth_bytes_per_s"]),
            launch_overhead_s=float(obj["launch_overhead_s"]),
            efficiency={str(k): float(v) for k, v in obj.get("efficiency", {}).items()},
            memory_bytes=int(obj.get("memory_bytes", 0)),
            conv_uses_tf32=bool(obj.get("conv_uses_tf32", False)),
            source=str(obj.get("source", "")), calibrated=dict(obj.get("calibrated", {})),
            conv_flops_per_s={str(k): float(v)
                              for k, v in obj.get("conv_flops_per_s", {}).items()},
            attention_flops_per_s={str(k): float(v) for k, v in
                                   obj.get("attention_flops_per_s", {}).items()})
    except KeyError as e:
        raise ConfigError(f"{where}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{where}: malformed ({e})") from None


def save_profile(p: DeviceProfile, path: str | os.PathLike[str]) -> Path:
    """Write a profile as JSON (parent folders made); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile_to_dict(p), indent=1, sort_keys=True) + "\n")
    return out


def load_profile_file(path: str | os.PathLike[str]) -> DeviceProfile:
    """Read a profile JSON file.

    Raises
    ------
    ConfigError
        The file cannot be read or is not a profile.
    """
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read device profile {os.fspath(path)!r}: {e.strerror}"
                          ) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"device profile {os.fspath(path)!r} is not JSON: {e}") from None
    return profile_from_dict(obj, f"device profile {os.fspath(path)!r}")


def resolve_profile(name: str) -> DeviceProfile:
    """The profile called ``name``: a published one, a measured one, or a JSON file.

    Raises
    ------
    ConfigError
        An unknown name, or a measured profile not yet measured on this machine (the
        message says how: ``roam calibrate``).
    """
    if name in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name]
    if name in MEASURED_PROFILES:
        path = profile_path(name)
        if not path.is_file():
            flag = "" if name == "cpu" else f" --device {name}"
            raise ConfigError(f"device profile {name!r} is not calibrated on this machine: "
                              f"run `roam calibrate{flag}` (writes {path})")
        return load_profile_file(path)
    if name.endswith(".json") and Path(name).is_file():
        return load_profile_file(name)
    raise ConfigError(f"unknown device profile {name!r}; known: "
                      f"{', '.join(known_profiles())}, or a profile JSON file")
