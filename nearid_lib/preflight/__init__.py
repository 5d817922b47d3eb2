"""The preflight of a run (``nearid preflight --profile paper``, ``make preflight``): everything the
run will read or need, checked in seconds before any notebook, model or GPU step, one line per
problem with its fix, exit status 1 on any.

What is checked, and where the list comes from (so that a repository or step added later is checked
without new code here):

- **the mirror** (:mod:`.repos`): every repository of :data:`nearid_lib.hub.PAPER_REPOS` present and
  complete against its download record (:mod:`nearid_lib.mirror`: files and sizes, by ``stat``),
  model folders holding weights, gated ones with the way to log in. A repository may be absent
  without a problem only for a reason the project declares: a gate of :mod:`nearid_lib.gates` names
  it (its tables are then skipped with that reason), the run does not read it with this profile
  (CLIPSeg when the release masks every view; a generation method's models when the method is not
  generated or your images replace it), or ``--allow-missing REPO``;
- **the datasets** (:mod:`.datasets`): the positives' layout, columns and rows from parquet metadata,
  every distractor repository's rows aligned with the positives by their ``id`` column alone (arrow
  shards memory-mapped; no image is read), MTG's columns, the splits (the ``split`` column, the
  authors' split files, their agreement, the official sizes), the authors' clone at its recorded
  commit and each file the run reads from it;
- **the machine** (:mod:`.machine`): the environment variables the steps need, free disk against
  the run's projected outputs per file system (materialised PNGs, token store, caches: sizes
  computed from the data and the config, formulas in docs/paper-profile.md), visible GPUs against
  the judge's and the trainer's memory (with the judge's sharding plan).

No model is loaded, but the backbone when a token store of it already lies in the cache (the key of
the store the run opens covers its weights and code: :func:`.machine.run_store`), and no image is
decoded. :func:`run_preflight` returns a :class:`Report`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from .datasets import check_datasets
from .findings import Finding, Report
from .machine import check_machine
from .repos import check_repos

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["Finding", "Report", "run_preflight", "CHECKS"]

# The checks, in order: each takes (cfg, report) and appends findings. A check that itself fails
# is reported as a problem of the preflight (never a traceback), and the others still run.
# The data check runs first: it tells the mirror check whether the release masks every view.
CHECKS: tuple[tuple[str, Callable], ...] = (("data", check_datasets), ("mirror", check_repos),
                                            ("machine", check_machine))


@dataclass
class _Timer:
    t0: float = field(default_factory=time.perf_counter)

    def seconds(self) -> float:
        return time.perf_counter() - self.t0


def run_preflight(cfg: Profile, allow_missing: Sequence[str] = (), log: Callable[[str], None] | None = None) -> Report:
    """Every check of the module docstring on profile ``cfg``; ``allow_missing``: repositories the
    user accepts to be absent. Prints each line through ``log`` as it is found (default: nothing)."""
    rep = Report(cfg.name, allow_missing=tuple(allow_missing), log=log)
    clock = _Timer()
    if cfg.world.source != "released":
        rep.note("profile", f"profile {cfg.name!r} reads no released data (world.source="
                 f"{cfg.world.source!r}): nothing to check")
        return rep
    for name, check in CHECKS:
        try:
            check(cfg, rep)
        except Exception as err:                   # noqa: BLE001 - a broken check is a finding, not a crash
            rep.problem(name, f"the {name} check itself failed: {type(err).__name__}: {err}",
                        "report this as a bug of nearid_lib.preflight; the other checks ran")
    rep.seconds = clock.seconds()
    return rep
