"""The ``nearid`` command (also ``python -m nearid_lib``): thin wrappers over the library.

::

    nearid score ENCODER [--profile mini] [--protocols nearid,idsim,fpr] [--name N] [--out DIR]
    nearid sim A B [--encoder NAME] [--out sims.csv]                   # cosine similarity of images / pairs
    nearid rank GENERATED GALLERY [--encoder efficientnet-lite0] [--group-by species] [--out CSV]
    nearid train [--profile mini] [--set train.lr=3e-4 ...]          # the NearID head (notebook 03)
    nearid report [--profile mini]                                   # figures/README.md (notebook 99)
    nearid dbpp-mh RATINGS_DIR [--scores NAME=DIR ...] --out FILE.csv  # DreamBench++ M-H from per-image scores
    nearid preflight [--profile paper] [--allow-missing REPO ...]    # everything a run reads, in seconds

``ENCODER`` is, in this order of precedence, ``package.module:function`` or ``file.py:function``
naming your callable ``list[PIL.Image] -> [N, D]``, a registered name, a ``timm:...`` /
``open_clip:...`` identifier or a hub id ``org/repo``. It is resolved, loaded and probed on two
small images before any data is built or read, so a wrong one exits with status 2 and one line
(listing what was tried) in seconds. Every
command takes ``--profile`` and ``--set KEY=VALUE`` (dotted config overrides), sets torch's threads
to the profile's ``runtime.threads`` (from ``NEARID_THREADS``, else ``OMP_NUM_THREADS``; ``--set
runtime.threads=N`` wins) and shows progress bars.

Each command imports the library inside its own function: ``nearid --help`` and a mistyped
argument answer without importing torch (seconds). This is the one module whose library imports sit
in functions (``tests/test_layers.py`` checks it); none of them dodges a cycle, as it is the top
of the layers.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["main", "build_parser"]

_PROFILES = ("smoke", "mini", "paper")


def _overrides(pairs: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            parser.error(f"--set needs KEY=VALUE, got {kv!r}")
        out[key.strip()] = value.strip()
    return out


def _common(p: argparse.ArgumentParser, profile_default: str = "mini") -> None:
    p.add_argument("--profile", choices=_PROFILES, default=profile_default,
                   help=f"smoke (seconds), mini (offline reproduction), paper (GPU + hub); default {profile_default}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. train.lr=3e-4 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    ap = argparse.ArgumentParser(prog="nearid", description="NearID / ID-Sim / FPR: score your encoder or "
                                 "generator, train the NearID head, render the report.")
    sub = ap.add_subparsers(dest="command", required=True,
                            metavar="{score,sim,rank,train,report,dbpp-mh,preflight}")

    s = sub.add_parser("score", help="score an encoder on NearID, ID-Sim and FPR beside the baselines and papers")
    s.add_argument("encoder", help="module:function, file.py:function, registered name, timm:/open_clip: "
                   "identifier or org/repo (tried in that order)")
    s.add_argument("--protocols", default="nearid,idsim,fpr", help="comma-separated subset (default all)")
    s.add_argument("--name", default=None, help="label of your row (default: the encoder)")
    s.add_argument("--out", default=None, help="folder of the table and report card (default build/<profile>/score/<name>)")
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--no-baselines", action="store_true", help="score only ENCODER")
    s.add_argument("--no-cache", action="store_true", help="do not cache a callable's embeddings")
    s.add_argument("--checkpoint", default=None, help="checkpoint of a named encoder (nearid, idsim, classifier)")
    s.add_argument("--seed", type=int, default=0)
    _common(s)

    m = sub.add_parser("sim", help="cosine similarity of two images, two folders of same-named files, or a CSV "
                       "of pairs")
    m.add_argument("a", help="an image, a folder, or a CSV of pairs (columns a, b) when B is left out")
    m.add_argument("b", nargs="?", default=None, help="an image or a folder (same file names as A)")
    m.add_argument("--encoder", default=None, help="registered name, module:function, file.py:function or hub id "
                   "(default: the released NearID model in paper, the trained NearID head or else the frozen "
                   "backbone offline)")
    m.add_argument("--checkpoint", default=None, help="checkpoint of a named encoder (e.g. a NearID head folder)")
    m.add_argument("--out", default=None, help="write the pairs and their similarity here (CSV)")
    m.add_argument("--batch-size", type=int, default=32)
    _common(m)

    r = sub.add_parser("rank", help="Finer-Personalization Rank of generated images against a gallery")
    r.add_argument("generated", help="generated_data.csv or a folder of <identity>/<file> images")
    r.add_argument("gallery", help="gallery_data.csv or the folder holding it (and train_data.csv)")
    r.add_argument("--encoder", default="efficientnet-lite0",
                   help="evaluation encoder: registered name, module:function, file.py:function or hub id")
    r.add_argument("--references", default=None, help="train_data.csv (default: beside the gallery)")
    r.add_argument("--method", default=None, help="score only this method's rows")
    r.add_argument("--group-by", default="species", help="column each query's gallery is restricted to; 'none': all")
    r.add_argument("--sim-to", default="ref_path", choices=("ref_path", "references", "gallery"))
    r.add_argument("--background", default="kept", choices=("kept", "removed"))
    r.add_argument("--checkpoint", default=None, help="checkpoint of the encoder (e.g. a NearID head folder)")
    r.add_argument("--out", default=None, help="write the per-method summary here (CSV; per-query beside it)")
    _common(r)

    t = sub.add_parser("train", help="train the NearID head (what notebook 03_train_nearid does)")
    t.add_argument("--data", default=None, help="dataset root (default data_dir(profile)/nearid)")
    t.add_argument("--out", default=None, help="checkpoint folder (default checkpoint_dir(profile)/nearid)")
    t.add_argument("--no-resume", action="store_true")
    t.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resumable)")
    _common(t)

    p = sub.add_parser("report", help="render figures/README.md from the tables (what notebook 99_report does)")
    _common(p)

    d = sub.add_parser("dbpp-mh", help="DreamBench++ metric-to-human r (NearID Table 2, Table 1's DB++ column, "
                       "Figure 4) from per-image scores in the layout of the NearID authors' ratings folder")
    d.add_argument("ratings", help="the ratings folder (dreambench_plus/ratings of Gorluxor/NearID: "
                   "data_<scorer>_rating/, data_human_rating/merged_data/group{1,2}/)")
    d.add_argument("--scores", action="append", default=[], metavar="NAME=DIR",
                   help="your own scorer: a folder of <method>.json {image key: score} (repeatable)")
    d.add_argument("--out", required=True, help="CSV with one row per (scorer, category, method): scorer, "
                   "category, method, r, r_spread, n")
    _common(d)

    f = sub.add_parser("preflight", help="check everything a run reads or needs (mirror, datasets, splits, the "
                       "authors' release, environment, disk, GPUs) in seconds; exit 1 on any problem")
    f.add_argument("--allow-missing", nargs="+", default=[], metavar="REPO",
                   help="hub repositories you accept to be absent from the mirror (their tables are skipped)")
    _common(f, profile_default="paper")
    return ap


def _score(args, over) -> int:
    from .score import score_encoder

    kw = {"checkpoint": args.checkpoint} if args.checkpoint else None
    rep = score_encoder(args.encoder, tuple(x.strip() for x in args.protocols.split(",") if x.strip()), args.profile,
                        name=args.name, out_dir=args.out, baselines=not args.no_baselines, seed=args.seed,
                        batch_size=args.batch_size, cache=not args.no_cache, overrides=over, encoder_kw=kw)
    print(rep)
    for n in rep.notes:
        print("note:", n)
    print(f"report card: {rep.files['card']}")
    return 0


def _sim(args, over) -> int:
    import pandas as pd

    from .sim import describe, similarity

    kw = {"checkpoint": args.checkpoint} if args.checkpoint else None
    df = similarity(args.a, args.b, args.encoder, profile=args.profile, batch_size=args.batch_size, encoder_kw=kw)
    with pd.option_context("display.width", 200, "display.max_colwidth", 80, "display.max_rows", 50):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(describe(df))
    if args.out:
        from .io_utils import write_csv

        print(f"wrote {write_csv(df, Path(args.out))}")
    return 0


def _rank(args, over) -> int:
    import pandas as pd

    from .config import get_profile
    from .fpr import rank_generator
    from .models import resolve_encoder

    cfg = get_profile(args.profile, over)
    kw = {"checkpoint": args.checkpoint} if args.checkpoint else {}
    # resolve and probe the encoder before reading a single image: a wrong name fails in seconds
    enc = resolve_encoder(args.encoder, encoder_kw={**kw, "tiny": cfg.backbone.tiny, "cache": True})
    encoder = args.encoder if enc.canon is not None else enc.model
    res = rank_generator(args.generated, args.gallery, encoder, references=args.references, method=args.method,
                         group_by=None if args.group_by.lower() == "none" else args.group_by, sim_to=args.sim_to,
                         background=args.background, tiny=cfg.backbone.tiny, encoder_kw=kw,
                         batch_size=cfg.retrieval.batch_size)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(res.summary.to_string(index=False))
    if args.out:
        from .io_utils import write_csv

        out = write_csv(res.summary, Path(args.out))
        write_csv(res.per_query, out.with_name(out.stem + "_per_query.csv"))
        print(f"wrote {out}")
    return 0


def _train(args, over) -> int:
    from .config import get_profile
    from .data import build_world
    from .nearid.train import main as train_main

    cfg = get_profile(args.profile, over)
    if args.data is None and cfg.world.source == "procedural":
        build_world(cfg, progress=True)        # a fresh clone: build the world first (reused when complete)

    argv = ["--profile", args.profile, *sum((["--set", f"{k}={v}"] for k, v in over.items()), [])]
    argv += (["--data", args.data] if args.data else []) + (["--out", args.out] if args.out else [])
    argv += (["--no-resume"] if args.no_resume else []) + \
        (["--stop-after", str(args.stop_after)] if args.stop_after is not None else [])
    return train_main(argv)


def _report(args, over) -> int:
    from .config import get_profile
    from .io_utils import atomic_write_text
    from .paths import figures_dir
    from .report import profile_note, render_report

    cfg = get_profile(args.profile, over)
    figs = figures_dir(cfg.name)
    text = render_report(figs, profile_note=profile_note(cfg.name, cfg.backbone.name, cfg.world.source))
    print(f"wrote {atomic_write_text(figs / 'README.md', text)}")
    return 0


def _dbpp_mh(args, over) -> int:
    import pandas as pd

    from .io_utils import write_csv
    from .nearid.dbpp_released import mh_long, read_ratings

    extra = {}
    for kv in args.scores:
        name, sep, folder = kv.partition("=")
        if not sep or not name.strip() or not folder.strip():
            raise ValueError(f"--scores needs NAME=DIR, got {kv!r}")
        extra[name.strip()] = folder.strip()
    mh = mh_long(read_ratings(args.ratings, extra))
    head = mh[(mh["method"] == "fisher_z") & mh["category"].isin(["object", "all4"])]
    with pd.option_context("display.width", 160):
        print(head.pivot(index="scorer", columns="category", values="r").to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {write_csv(mh, Path(args.out))} ({len(mh)} rows)")
    return 0


def _preflight(args, over) -> int:
    from .config import get_profile
    from .preflight import run_preflight

    rep = run_preflight(get_profile(args.profile, over), args.allow_missing)
    for line in rep.lines():
        print(line)
    return 0 if rep.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``nearid`` / ``python -m nearid_lib``; returns the exit status."""
    ap = build_parser()
    args = ap.parse_args(argv)
    over = _overrides(args.set, ap)
    if args.profile != "paper":
        # offline profiles: a missing model fails at once instead of retrying the hub (as make does)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from .config import ConfigError, get_profile
    from .runtime import set_torch_threads

    try:
        # the profile's threads; a bad --set (or NEARID_SET) fails here, loudly, for every command
        rt = get_profile(args.profile, over).runtime
        set_torch_threads(rt.threads, rt.tune_malloc)
        commands = {"score": _score, "sim": _sim, "rank": _rank, "train": _train, "report": _report,
                    "dbpp-mh": _dbpp_mh, "preflight": _preflight}
        return commands[args.command](args, over)
    except (ConfigError, FileNotFoundError, ValueError, OSError, KeyError) as err:
        msg = " ".join(str(err).split())        # one line, as the README promises (no traceback)
        print(f"nearid {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
