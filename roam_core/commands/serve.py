"""``roam serve``: start the Dash app (binds 127.0.0.1, debug off unless asked)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` sub-command."""
    p = subparsers.add_parser("serve", help="start the web app on a planned sample graph",
                              description="Start the roam web app.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--graph", metavar="FILE", help="graph file to open (default: a sample)")
    p.add_argument("--debug", action="store_true", help="Dash debug mode (never in production)")
    p.add_argument("--cache-dir", metavar="D", help="cache for graphs, plans and jobs "
                   "(default $ROAM_CACHE_DIR or <tmp>/roam-cache)")
    p.add_argument("--max-upload-mb", type=float, default=200.0,
                   help="largest accepted upload in MiB (default 200)")
    p.add_argument("--startup-time-limit", type=float, default=5.0, metavar="S",
                   help="planner time limit of the start-up plan in seconds (default 5)")
    p.add_argument("--startup-method", default="roam", metavar="M",
                   help="method of the start-up plan: roam (default) or a baseline "
                        "(eager, lescea, inductor, xla), e.g. for very large graphs")
    p.set_defaults(func=_handler)


def _handler(args: argparse.Namespace) -> int:
    from app import create_app  # the one place roam_core loads the app (lazily)

    app = create_app(args.graph, cache_dir=args.cache_dir, max_upload_mb=args.max_upload_mb,
                     startup_time_limit_s=args.startup_time_limit,
                     startup_method=args.startup_method)
    print(f"roam app on http://{args.host}:{args.port}/")
    app.run(host=args.host, port=args.port, debug=bool(args.debug))
    return 0
