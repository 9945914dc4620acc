"""What the benchmark scripts share: writing their JSON result and turning the
toolkit's input errors into a one-line message instead of a traceback."""
from __future__ import annotations

import json
import sys
from typing import Callable, Optional


def write_json(path: Optional[str], out: dict) -> None:
    """Write ``out`` to ``path`` (indented JSON) and say so; nothing when ``path`` is None."""
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {path}")


def parse_or_work(parse_args: Callable, worker: Callable, argv=None):
    """``(argv, args)`` of a benchmark that runs its measurements in worker processes
    (``--worker NAME``: the child started by the parent); None after a worker has
    printed its result as JSON on stdout (the parent reads it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return None
    return argv, args


def run_main(main: Callable[[], object]) -> None:
    """Run a script's ``main()``; a :class:`~nbest_rescore.errors.DataError` (a missing
    or malformed checkpoint, N-best directory or reference file) ends the script with
    ``error: <message>`` on stderr and exit status 1, without a traceback."""
    from nbest_rescore.errors import DataError

    try:
        main()
    except DataError as exc:
        sys.exit(f"error: {exc}")


def check_inputs(parser, lm: str, nbest: str) -> None:
    """Stop with a usage error (exit status 2) unless ``lm`` is a file and ``nbest`` a
    directory, before any work starts."""
    import os

    if not os.path.isfile(lm):
        parser.error(f"--lm {lm}: no such checkpoint file (write one with nbest-rescore train or "
                     f"benchmarks/make_random_checkpoint.py)")
    if not os.path.isdir(nbest):
        parser.error(f"--nbest {nbest}: no such N-best directory (e.g. ../shared/data/abc-nbest/dev)")
