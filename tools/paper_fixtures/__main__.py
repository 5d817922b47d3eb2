"""``python -m tools.paper_fixtures write HUB_DIR DOWNLOADS_DIR`` | ``overrides`` | ``check FIGURES_DIR``
| ``damage HUB_DIR DOWNLOADS_DIR [--defects column truncated template ...]``."""
from __future__ import annotations

import argparse
import sys

from . import check_kernel_loads, check_step_records, check_tables, overrides_text, write_mirror
from .damage import DEFECTS, damage


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.paper_fixtures", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the fixture mirror and the hand-downloaded fixtures")
    w.add_argument("hub_dir")
    w.add_argument("downloads_dir")
    w.add_argument("--seed", type=int, default=0)
    sub.add_parser("overrides", help="print the size-only NEARID_SET of the dry run")
    c = sub.add_parser("check", help="every paper table written or skipped with a reason")
    c.add_argument("figures_dir")
    d = sub.add_parser("damage", help="apply a real mirror's defects to a fixture mirror (for the preflight)")
    d.add_argument("hub_dir")
    d.add_argument("downloads_dir")
    d.add_argument("--defects", nargs="+", default=["column", "truncated", "template"], choices=sorted(DEFECTS))
    a = p.parse_args(argv)
    if a.cmd == "damage":
        for line in damage(a.hub_dir, a.downloads_dir, a.defects):
            print("damaged:", line)
        return 0
    if a.cmd == "write":
        for kind, names in write_mirror(a.hub_dir, a.downloads_dir, a.seed).items():
            print(f"{kind}: {', '.join(names)}")
        return 0
    if a.cmd == "overrides":
        print(overrides_text())
        return 0
    problems = check_tables(a.figures_dir) + check_step_records() + check_kernel_loads(a.figures_dir)
    for line in problems:
        print("dry run:", line, file=sys.stderr)
    print(f"dry run: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
