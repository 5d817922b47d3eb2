"""Execute one jupytext notebook source with papermill in this one process (``scripts/run_notebook.sh``
calls it): convert ``SRC.py`` to a notebook, start its kernel under portable numerics (the pinned
code paths and thread counts of :func:`nearid_lib.runtime.kernel_environment`, set here before the
kernel starts, since a notebook imports numpy and torch before ``nearid_lib``), execute it into
``PARTIAL.ipynb`` and give its progress bars their final text (``finalise_notebook.py``).

One interpreter instead of four (jupytext's command line, the exports, papermill's command line, the
finaliser): about 3 s less start-up per notebook, 28 notebooks in ``make test``.

Usage: ``python scripts/execute_notebook.py SRC.py PARTIAL.ipynb PROFILE SEED``; run from the
repository root (the kernel's working directory). Exit status: 0 executed and finalised; 1 the
notebook failed (``PARTIAL.ipynb`` holds the executed copy with the error); 3 executed, but its
progress bars keep their first text (the reason is printed).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    src, partial, profile, seed = Path(argv[0]), Path(argv[1]), argv[2], int(argv[3])
    sys.path.insert(0, os.getcwd())                     # this checkout's nearid_lib, as the kernel sees it
    from nearid_lib.runtime import kernel_environment

    os.environ.update(kernel_environment())

    import logging

    import papermill
    from jupytext.cli import jupytext

    src_nb = partial.with_name(f".{src.stem}.src.ipynb")
    jupytext(["--quiet", "--to", "ipynb", "--set-kernel", "python3", "-o", str(src_nb), str(src)])
    logging.basicConfig(level="INFO", format="%(message)s")     # as papermill's command line: --log-output
    try:
        papermill.execute_notebook(str(src_nb), str(partial), parameters={"PROFILE": profile, "SEED": seed},
                                   kernel_name="python3", cwd=os.getcwd(), log_output=True, progress_bar=True)
    except papermill.PapermillExecutionError as e:
        print(f"[notebook] {src.stem}: {e}", file=sys.stderr)
        return 1
    src_nb.unlink(missing_ok=True)
    sys.path.insert(0, str(HERE))
    try:
        from finalise_notebook import main as finalise
        finalise([str(partial)])
    except Exception as e:                              # the run itself succeeded
        print(f"[notebook] {partial.name}: progress bars not finalised: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
