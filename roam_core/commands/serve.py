"""``roam serve``: start the Dash app (binds 127.0.0.1, debug off unless asked).

The app is served by waitress, a production WSGI server (threads, request-size limits, no
debugger); Flask's development server runs only with ``--debug``.  The app's responses carry
standard security headers either way (:func:`app.factory.create_app`).
"""

from __future__ import annotations

import argparse

from roam_core.commands.arg_types import port_number, positive_float, positive_int, upload_mib

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` sub-command."""
    p = subparsers.add_parser("serve", help="start the web app on a planned sample graph",
                              description="Start the roam web app.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8050, help="port (default 8050)")
    p.add_argument("--graph", metavar="FILE", help="graph file to open (default: a sample)")
    p.add_argument("--debug", action="store_true",
                   help="Dash debug mode on Flask's development server (never in production; "
                        "default: the waitress WSGI server)")
    p.add_argument("--threads", type=positive_int, default=8, metavar="N",
                   help="request threads of the WSGI server (default 8)")
    p.add_argument("--cache-dir", metavar="D", help="cache for graphs, plans and jobs "
                   "(default $ROAM_CACHE_DIR or <tmp>/roam-cache)")
    p.add_argument("--max-upload-mb", type=upload_mib, default=200.0,
                   help="largest accepted upload in MiB (default 200)")
    p.add_argument("--startup-time-limit", type=positive_float, default=5.0, metavar="S",
                   help="planner time limit of the start-up plan in seconds (default 5)")
    p.add_argument("--startup-method", default="roam", metavar="M",
                   help="method of the start-up plan: roam (default) or a baseline "
                        "(eager, lescea, inductor, xla), e.g. for very large graphs")
    p.set_defaults(func=_handler)


def _handler(args: argparse.Namespace) -> int:
    from roam_core.base.atomic import check_output_dir

    if args.cache_dir:
        check_output_dir(args.cache_dir, "--cache-dir")  # before the start-up plan
    from app import create_app  # the one place roam_core loads the app (lazily)

    app = create_app(args.graph, cache_dir=args.cache_dir, max_upload_mb=args.max_upload_mb,
                     startup_time_limit_s=args.startup_time_limit,
                     startup_method=args.startup_method)
    url = f"http://{args.host}:{args.port}/"
    if args.debug:
        print(f"roam app on {url} (Flask development server: --debug)")
        app.run(host=args.host, port=args.port, debug=True)
        return 0
    import waitress  # type: ignore[import-untyped]  # no stubs published

    print(f"roam app on {url}")
    waitress.serve(app.server, host=args.host, port=args.port, threads=args.threads,
                   max_request_body_size=int(app.server.config["MAX_CONTENT_LENGTH"]),
                   ident="roam", _quiet=True)
    return 0
