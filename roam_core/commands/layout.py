"""``roam layout INPUT.csv -o OUT.csv``: solve a MiniMalloc-format allocation problem.

Writes the input rows plus an ``offset`` column and prints the height, the lower bound and
the seconds spent.  With ``--capacity`` any layout within it is accepted (exit 1 when none
was found in time; an impossible capacity is an error, exit 2); without, the height is
minimised within ``--time-limit``.
"""

from __future__ import annotations

import argparse

from roam_core.commands.arg_types import positive_float, positive_int

__all__ = ["register"]






def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``layout`` sub-command."""
    p = subparsers.add_parser(
        "layout", help="solve a MiniMalloc CSV allocation problem (offsets per buffer)",
        description="Assign an offset to every buffer of a MiniMalloc CSV file "
                    "(id,lower,upper,size[,alignment][,offset]; lifetimes half-open) so that "
                    "buffers live together never share bytes.  Greedy portfolio first, then "
                    "an exact search over canonical layouts.")
    p.add_argument("input", help="problem CSV (.csv or .csv.gz)")
    p.add_argument("-o", "--output", required=True, help="where to write the solved CSV")
    p.add_argument("--time-limit", type=positive_float, default=60.0, metavar="S",
                   help="seconds to spend (default 60)")
    p.add_argument("--work-limit", type=positive_int, default=None, metavar="N",
                   help="search nodes when minimising (default: 1000 per second of "
                        "--time-limit); the layout then depends only on the input and N, "
                        "not on machine load")
    p.add_argument("--capacity", type=positive_int, default=None, metavar="C",
                   help="find a layout of height at most C (default: minimise the height)")
    p.add_argument("--alignment", type=positive_int, default=None, metavar="A",
                   help="every offset a multiple of A (overrides an alignment column)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    from roam_core.base.atomic import check_output_path
    from roam_core.base.errors import PlanInvalidError
    from roam_core.formats.dsa_csv import load_problem, save_problem
    from roam_core.layout.dsa_solver import solve_dsa
    from roam_core.model.dsa import Problem
    from roam_core.oracle.validate import check_dsa_solution

    check_output_path(args.output, "-o/--output")
    problem = load_problem(args.input, capacity=args.capacity)
    if args.alignment is not None:
        problem = Problem(tuple(dataclasses.replace(b, alignment=args.alignment)
                                for b in problem.buffers), problem.capacity)
    result = solve_dsa(problem, time_limit_s=args.time_limit, work_limit=args.work_limit)
    if result.solution is None:
        print(f"no layout within capacity {args.capacity} found in "
              f"{result.wall_time_s:.2f} s ({result.status}); lower bound "
              f"{result.lower_bound}")
        return 1
    violations = check_dsa_solution(problem, result.solution)
    if violations:  # a solver bug: never write a bad layout
        raise PlanInvalidError(violations)
    save_problem(args.output, problem, result.solution)
    h, lb = result.solution.height, result.lower_bound
    ratio = h / lb if lb else 1.0
    print(f"height {h}, lower bound {lb} ({ratio:.4f} x), {result.wall_time_s:.2f} s, "
          f"{result.status} via {result.method}, {result.nodes} search nodes"
          f"{', stopped by the ' + result.stopped_by + ' limit' if result.stopped_by else ''}, "
          f"{len(problem)} buffers -> {args.output}")
    return 0
