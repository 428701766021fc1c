"""``roam calibrate [--device cpu|cuda]``: measure this machine's device profile.

Runs the micro-benchmarks of :mod:`roam_core.runtime.calibrate` (matmul, conv, elementwise,
transcendental, copy, launch; a few seconds) and writes the profile as JSON where
``--device-profile cpu`` (or ``cuda``) finds it
(:func:`roam_core.formats.device_profile_io.profile_path`; ``-o`` writes elsewhere, and
``--device-profile PATH.json`` reads that).  Prints what was measured
(``--json``: the profile file's object).
"""

from __future__ import annotations

import argparse
import json

from roam_core.commands.arg_types import positive_float

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``calibrate`` sub-command."""
    p = subparsers.add_parser(
        "calibrate", help="measure this machine's device profile for the cost model",
        description="Time matmul, convolution, elementwise, copy and launch micro-benchmarks "
                    "on this machine's CPU (or GPU) and store the result as a device profile "
                    "(--device-profile cpu / cuda uses it).")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="the device to measure (default cpu, with torch's thread count)")
    p.add_argument("--seconds", type=positive_float, default=3.0, metavar="S",
                   help="wall time to spend measuring (default 3)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="time with the wall clock (default) or this process's CPU time (CPU "
                        "only: other processes on a loaded machine do not slow it down)")
    p.add_argument("-o", "--output", default=None, metavar="PATH",
                   help="profile file to write (default: the cache file --device-profile "
                        "<device> reads)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from roam_core.formats.device_profile_io import profile_path, profile_to_dict, save_profile
    from roam_core.runtime.calibrate import calibrate

    prof = calibrate(args.device, seconds=args.seconds, clock=args.clock)
    path = save_profile(prof, args.output or profile_path(prof.name))
    if args.json:
        print(json.dumps(profile_to_dict(prof), sort_keys=True))
        return 0
    m = prof.calibrated["measured"]
    print(f"roam calibrate: {prof.description}")
    for dt, r in m["matmul_flops_per_s"].items():
        print(f"  matmul {dt:<9} {r / 1e9:10.1f} GFLOP/s")
    for dt, r in m["conv_flops_per_s"].items():
        print(f"  conv   {dt:<9} {r / 1e9:10.1f} GFLOP/s")
    for dt, r in m.get("attention_flops_per_s", {}).items():
        print(f"  attention {dt:<6} {r / 1e9:10.1f} GFLOP/s")
    print(f"  elementwise      {m['elementwise_bytes_per_s'] / 1e9:10.2f} GB/s")
    print(f"  transcendental   {m['transcendental_bytes_per_s'] / 1e9:10.2f} GB/s (tanh)")
    for key, label in (("norm", "layer norm"), ("batch_norm", "batch norm")):
        if f"{key}_bytes_per_s" in m:
            print(f"  {label:<16} {m[f'{key}_bytes_per_s'] / 1e9:10.2f} GB/s")
    print(f"  copy             {m['copy_bytes_per_s'] / 1e9:10.2f} GB/s")
    print(f"  launch           {1e6 * m['launch_s']:10.2f} us per op")
    print(f"  wrote {path} (use --device-profile {prof.name if args.output is None else path})")
    return 0
