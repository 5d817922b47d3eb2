"""Every GPU figure of the paper profile from one run: the judge, the token-store prefill, the grouped
head step, the curation of the release and the five FPR generation methods, each with random weights
at the real sizes (built on the GPU from configurations in ``gpu_suite_models.py``, no download), on
one GPU, inside a time budget.

    python benchmarks/gpu_suite.py --budget-s 420 --out DIR    # one GPU: DIR/gpu_suite_cuda.{json,md}
    python benchmarks/gpu_suite.py --tiny                      # the same code, tiny configs, CPU, < 1 min

Entries run in priority order (what the paper plan knows least first: the judge has no figure at
all); an entry whose estimated time no longer fits the budget is skipped, and the results say why.
Each entry is guarded: an error (out of memory, a missing class, its time allowance exceeded) is
recorded with its traceback's tail and the suite goes on. The JSON is rewritten after every entry,
so a run killed from outside keeps what it finished. ``benchmarks/cost_table.py`` turns the JSON into
the cost table of ``docs/paper-profile.md``.

On the lent GPU machine (Python 3.12, torch 2.11; no diffusers, open_clip, ftfy there): the wheels
travel in ``.whl/`` (``make gpu-wheels`` here fetches them and writes ``.whl/COMMIT``), and the one
command, with ``carry: [".whl"]`` and ``timeout_s: 500``, is (``benchmarks/README.md``, one line there)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 \
        TOKENIZERS_PARALLELISM=false; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv \
        > $OUT/nvidia-smi.csv; python3 benchmarks/gpu_suite.py --budget-s 420 --workdir /tmp --out $OUT 2>&1 \
        | tee $OUT/gpu_suite.log

A rerun of what was skipped or failed, on the warm machine: ``--only ENTRY ... --merge
benchmarks/results/gpu_suite_cuda.json`` (the first run's JSON copied there travels with the tree).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

T0 = time.perf_counter()
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import torch  # noqa: E402

import gpu_suite_fpr as F  # noqa: E402
import gpu_suite_judge as J  # noqa: E402
import gpu_suite_nearid as N  # noqa: E402
from gpu_suite_core import Ctx, free  # noqa: E402
from gpu_suite_models import SOURCES, sizes  # noqa: E402
from gpu_suite_report import render  # noqa: E402
from nearid_lib.io_utils import atomic_write_text, write_json  # noqa: E402

SCHEMA = 1


@dataclass(frozen=True)
class Entry:
    """One measurement: its function, its estimated seconds on an H100 (what the budget plans with)
    and the shared models it reuses from the entry before it."""

    name: str
    fn: Callable[[Ctx], dict]
    estimate_s: float
    shares: tuple[str, ...] = field(default=())


# priority order: the largest unknowns of the paper plan first (the judge has no figure at all; the
# prefill, the sweep's grouped step and curation decide the NearID wall time; then FPR generation,
# its largest projected GPU-hours first)
ENTRIES = (
    Entry("judge", J.judge, 130),
    Entry("prefill", N.prefill, 60),
    Entry("head_group", N.head_group, 25),
    Entry("curation", N.curation, 45),
    Entry("flux_kontext", F.flux_kontext, 70, ("flux_text",)),
    Entry("diptych", F.diptych, 45, ("flux_text",)),
    Entry("dreambooth_train_full", F.dreambooth_train_full, 55, ("sd3",)),
    Entry("dreambooth_infer", F.dreambooth_infer, 25, ("sd3",)),
    Entry("dreambooth_train_lora", F.dreambooth_train_lora, 25, ("sd3",)),
    Entry("ip_adapter", F.ip_adapter, 50),
    Entry("ip_adapter_plus", F.ip_adapter_plus, 45),
)
TINY_ESTIMATE_S = 5.0


class EntryTimeout(Exception):
    """An entry ran past its time allowance."""


def _alarm(seconds: float):
    def handler(signum, frame):
        raise EntryTimeout(f"ran past its allowance of {seconds:.0f} s")

    if hasattr(signal, "setitimer"):
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds))


def _disarm() -> None:
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def _commit() -> str | None:
    """The commit measured: ``NEARID_COMMIT``, else git, else ``.whl/COMMIT`` (written by ``make
    gpu-wheels``; the GPU machine gets the working tree without ``.git``)."""
    if os.environ.get("NEARID_COMMIT"):
        return os.environ["NEARID_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE.parent, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        f = HERE.parent / ".whl" / "COMMIT"
        return " ".join(f.read_text().split("\n")).strip() if f.exists() else None


def _code_sha256() -> str:
    """sha256 of the suite's and the library's Python sources (what the numbers were measured with)."""
    h = hashlib.sha256()
    for f in sorted([*HERE.glob("gpu_suite*.py"), *(HERE.parent / "nearid_lib").rglob("*.py")]):
        h.update(f.relative_to(HERE.parent).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("transformers", "diffusers", "peft", "accelerate", "open_clip"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as err:  # noqa: BLE001 - a missing package is recorded, not fatal
            out[mod] = f"missing ({type(err).__name__})"
    return out


def _forbid(names: list[str]) -> None:
    """Make importing ``names`` fail (the test's check that the suite needs no package the GPU
    machine lacks)."""
    import importlib.abc

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in names:
                raise ImportError(f"{name} is not on the GPU machine (gpu_suite --forbid-imports)")
            return None

    sys.meta_path.insert(0, Finder())


def run(args) -> dict:
    """Run the selected entries within the budget; returns the results (also written to ``args.out``)."""
    threads = torch.get_num_threads()
    try:
        return _run(args)
    finally:
        torch.set_num_threads(threads)          # a caller's (a test's) thread count is left as it was


def _run(args) -> dict:
    tiny = args.tiny
    dev = torch.device("cpu" if tiny or not torch.cuda.is_available() else "cuda")
    mode = "tiny" if tiny else dev.type
    out = Path(args.out)
    name = f"gpu_suite_{mode}"
    res: dict = {"schema": SCHEMA, "suite": "benchmarks/gpu_suite.py", "mode": mode,
                 "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({platform.machine()})",
                 "gpu_memory_gb": (round(torch.cuda.get_device_properties(dev).total_memory / 1e9, 1)
                                   if dev.type == "cuda" else None),
                 "cpu_count": os.cpu_count(), "budget_s": args.budget_s, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "commit": _commit(), "code_sha256": _code_sha256(), "versions": _versions(), "sources": SOURCES,
                 "entries": [], "skipped": []}
    run_meta = {k: res[k] for k in ("started", "commit", "device")}
    cores = max(1, min(os.cpu_count() or 1, 2 if tiny else 64))
    torch.set_num_threads(cores)
    order = [e for e in ENTRIES if not args.only or e.name in args.only]
    unknown = set(args.only or ()) - {e.name for e in ENTRIES}
    if unknown:
        raise SystemExit(f"gpu_suite: unknown entries {sorted(unknown)}; known: {[e.name for e in ENTRIES]}")
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="gpu_suite_") as tmp:
        ctx = Ctx(dev=dev, tiny=tiny, S=sizes(tiny), work=Path(tmp), cores=cores)
        for e in order:
            left = args.budget_s - (time.perf_counter() - T0)
            est = TINY_ESTIMATE_S if tiny else e.estimate_s
            rec = {"name": e.name, "priority": ENTRIES.index(e) + 1, "estimate_s": est, "run": run_meta}
            if est > left:
                rec.update(status="skipped", reason=f"budget: ~{est:.0f} s needed, {max(0, left):.0f} s left")
                res["skipped"].append({"name": e.name, "reason": rec["reason"]})
                res["entries"].append(rec)
                print(f"[{e.name}] skipped: {rec['reason']}", flush=True)
                continue
            for key in [k for k in ctx.shared if k not in e.shares]:
                ctx.shared.pop(key)
            free()
            allowance = left if tiny else min(left, max(2 * est, est + 60))
            print(f"[{e.name}] start ({left:.0f} s of the budget left, allowance {allowance:.0f} s)", flush=True)
            t0 = time.perf_counter()
            try:
                _alarm(allowance)
                r = e.fn(ctx)
                _disarm()
                rec.update(status="ok", stands_for=r.pop("stands_for"), sizes=r.pop("sizes"), result=r)
            except Exception as err:  # noqa: BLE001 - one entry's failure must not stop the others
                _disarm()
                oom = isinstance(err, torch.OutOfMemoryError)
                rec.update(status="error", reason=("out of memory" if oom else type(err).__name__) + f": {err}"[:400],
                           traceback=traceback.format_exc().splitlines()[-15:])
                del err
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            res["entries"].append(rec)
            print(f"[{e.name}] {rec['status']} in {rec['seconds']} s" + (f": {rec['reason']}" if "reason" in rec else ""),
                  flush=True)
            write_json(res, out / f"{name}.json")
        free(ctx)
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    res["wall_s"] = round(time.perf_counter() - T0, 1)
    if args.merge:
        res = merge(json.loads(Path(args.merge).read_text()), res)
    write_json(res, out / f"{name}.json")
    md = render(res, name)
    atomic_write_text(out / f"{name}.md", md)
    print(md, flush=True)
    return res


def merge(prev: dict, res: dict) -> dict:
    """``res`` (a rerun of some entries) over ``prev`` (an earlier run's results): the rerun's entries
    replace theirs, the others are kept, each with the run that measured it (``entry["run"]``)."""
    if prev.get("mode") != res["mode"]:
        raise SystemExit(f"gpu_suite --merge: the earlier results are of mode {prev.get('mode')!r}, this run {res['mode']!r}")
    new = {e["name"]: e for e in res["entries"]}
    old = {e["name"]: e for e in prev.get("entries", [])}
    res["entries"] = [new.get(e.name) or old[e.name] for e in ENTRIES if e.name in new or e.name in old]
    res["skipped"] = [{"name": e["name"], "reason": e["reason"]} for e in res["entries"] if e["status"] == "skipped"]
    res["merged_runs"] = prev.get("merged_runs", []) + [{k: prev.get(k) for k in ("started", "commit", "device",
                                                                                    "wall_s", "budget_s")}]
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny configurations on the CPU (the test's mode)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="seconds for the whole run, start-up included (default 420 on a GPU, 600 tiny)")
    ap.add_argument("--only", nargs="*", default=None, metavar="ENTRY", help="run only these entries (a rerun)")
    ap.add_argument("--out", default=str(HERE / "results"), help="folder of gpu_suite_<mode>.{json,md}")
    ap.add_argument("--merge", default=None, metavar="JSON",
                    help="an earlier run's results: keep its entries, replace those this run measures (a rerun)")
    ap.add_argument("--workdir", default=None, help="scratch folder (default $TMPDIR): put it on the disk a run would use")
    ap.add_argument("--forbid-imports", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.forbid_imports:
        _forbid(args.forbid_imports.split(","))
    if args.budget_s is None:
        args.budget_s = 600.0 if args.tiny else 420.0
    return run(args)


if __name__ == "__main__":
    main()
