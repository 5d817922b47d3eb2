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

# The long help of two subcommands: enough to build their inputs without reading the code.
_RANK_EPILOG = """\
inputs: three CSV tables (the FPR authors' layout), one row per image, columns
  name       the identity (subject) the image shows
  species    the group the identity belongs to (a bird species, a car family, an animal species):
             with --group-by species a query ranks only the gallery of its own group
  file_path  the image
  ref_path   a reference image of the identity: on a generated row, the reference the image was
             generated from (what --sim-to ref_path compares it with); on gallery and reference
             rows, the identity's first reference (required by the layout and checked to exist,
             not used for ranking)
  method     generated_data.csv only: the personalization method (a CSV without it takes its
             folder's name)
  mask_path  optional: the object's mask (255 = object), needed by --background removed
  prompt     optional, generated_data.csv: the prompt of the generation (kept, not scored)
  GENERATED  generated_data.csv, or a folder of <identity>/<file> or <identity>__<k>.png images
             (then species and ref_path come from train_data.csv)
  GALLERY    gallery_data.csv (real images of the identities, none of them a reference image) or
             the folder holding it and train_data.csv (the references the generator was shown)
  Paths are absolute or relative to the CSV's folder (when the first row's file is not there: to
  the nearest of the three folders above it where it is, as in this repository's datasets).

output: one row per method (--out FILE.csv; the per-query rows beside it, FILE_per_query.csv)
  map         gallery mAP: each generated image ranks the gallery by cosine similarity, AP with its
              identity's gallery images relevant, ties averaged over their orders; higher is better
  map_chance  the mAP a random ranking of the same galleries scores (chance level; printed too)
  sim         pairwise cosine similarity to the reference (--sim-to), the CLIP-I / DINO score
  top1        share of queries whose nearest gallery image shows their identity
  auc, ndcg   ROC-AUC of same- vs other-identity pairs and nDCG of the ranking, in the same scope
  n_queries, n_gallery  generated images scored, mean gallery size a query ranks

example: nearid rank my_method/generated_data.csv data/mini/nearid/fpr/gallery_data.csv \\
           --encoder efficientnet-lite0 --out my_method_fpr.csv
"""

_DBPP_EPILOG = """\
RATINGS_DIR layout (dreambench_plus/ratings of github.com/Gorluxor/NearID, the NearID authors'
release; python -m nearid_lib.hub download clones it to $NEARID_DOWNLOADS/NearID):
  data_<scorer>_rating/<method>.json                       a scorer's score of every image of a method
                                                           (scorers: nearid, backbone, backbone_maphead,
                                                           dino, clipi, vsm, qwen3vl_30b)
  data_gpt_rating/concept_preservation_full/<method>.json  GPT-4o's scores
  data_human_rating/merged_data/group1/<method>-cp.json    human ratings (0-4), rater group 1
  data_human_rating/merged_data/group2/<method>-cp.json    human ratings (0-4), rater group 2
  <method>: textual_inversion_sd, dreambooth_sd, dreambooth_lora_sdxl, blip_diffusion, emu2,
            ip_adapter_plus_vit_h_sdxl, ip_adapter_vit_g_sdxl (the methods both groups rated)
--scores NAME=DIR: your scorer, DIR/<method>.json for any of those methods (no "-cp" suffix).

every file: one JSON object {"<image key>": <number>, ...} over the same generated images (1,350 per
method in the release), in the order of the human file of its method (files are matched by
position, and their keys must agree):
  <image key> = <category>_<NN>_<subject>-<prompt>[_<k>]   e.g. live_subject_animal_00_kitten-0_0
  <category>  = live_subject_animal | live_subject_human | object | style (in this order)
  a trailing _<k> (image index) is dropped before comparing, and "rubik's_cube" (metric files)
  reads as "magic_cube" (human files). Any scale: only correlations are computed.

output (--out): one row per (scorer, category, method): scorer, category, method, r, r_spread, n
  r         mean over the two rater groups of the Pearson r of the scorer with the group
  r_spread  half the difference of the two r (on fisher_z rows: the standard error over methods)
  method = fisher_z   the Fisher-z mean over methods: NearID Table 2's bottom row
  category = all4     the Fisher-z mean of the four categories (a warning says when fewer exist);
                      NearID Table 1's DB++ column is the object category, not all4
  scorer = human_human  the two rater groups against each other
"""


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
                   help="dotted config override, e.g. train.lr=3e-4 (repeatable; the environment's "
                   "NEARID_SET takes several separated by ';')")


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
    s.add_argument("--batch-size", type=int, default=32, help="images per encoder forward (default %(default)s); "
                   "memory, not results")
    s.add_argument("--no-baselines", action="store_true", help="score only ENCODER")
    s.add_argument("--no-cache", action="store_true", help="do not cache a callable's embeddings")
    s.add_argument("--checkpoint", default=None, help="checkpoint of a named encoder (nearid, idsim, classifier)")
    s.add_argument("--seed", type=int, default=0)
    _common(s)

    m = sub.add_parser("sim", help="cosine similarity of two images, two folders of same-named files, or a CSV "
                       "of pairs", description="Cosine similarity of each pair, printed with the encoder that "
                       "answered and, for two pairs or more, the unpaired (chance) level of these images.")
    m.add_argument("a", metavar="A", help="an image, a folder, or a CSV of pairs (columns a, b) when B is left out")
    m.add_argument("b", metavar="B", nargs="?", default=None, help="an image or a folder (same file names as A)")
    m.add_argument("--encoder", default=None, help="registered name, module:function, file.py:function or hub id "
                   "(default: the released NearID model in paper, the trained NearID head or else the frozen "
                   "backbone offline)")
    m.add_argument("--checkpoint", default=None, help="checkpoint of a named encoder (e.g. a NearID head folder)")
    m.add_argument("--out", default=None, help="write the pairs and their similarity here (CSV), with a "
                   "provenance sidecar <name>.meta.json (encoder, profile, inputs, chance level, commit, date)")
    m.add_argument("--batch-size", type=int, default=32, help="images per encoder forward (default %(default)s); "
                   "memory, not results")
    _common(m)

    r = sub.add_parser("rank", help="Finer-Personalization Rank of generated images against a gallery",
                       description="Finer-Personalization Rank: how well each method's generated images retrieve "
                       "their own identity from a gallery of real images (mAP), beside pairwise similarity; "
                       "prints one row per method and the chance level.",
                       epilog=_RANK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("generated", metavar="GENERATED", help="generated_data.csv or a folder of images (below)")
    r.add_argument("gallery", metavar="GALLERY", help="gallery_data.csv or the folder holding it (below)")
    r.add_argument("--encoder", default="efficientnet-lite0",
                   help="evaluation encoder: registered name, module:function, file.py:function or hub id "
                   "(default %(default)s)")
    r.add_argument("--references", default=None, help="train_data.csv, the reference images (default: the one "
                   "beside the gallery); needed for a folder of generated images and for --sim-to references")
    r.add_argument("--method", default=None, help="score only this method's rows (default: every method)")
    r.add_argument("--group-by", default="species", help="column of both tables that restricts each query's "
                   "gallery to its own group (default %(default)s, the paper's per-species galleries); "
                   "'none': every query ranks the whole gallery")
    r.add_argument("--sim-to", default="ref_path", choices=("ref_path", "references", "gallery"),
                   help="what the pairwise similarity (column sim) compares a generated image with: its "
                   "row's ref_path (default), the mean over its identity's reference images, or over its "
                   "identity's gallery images (FPR Fig. 5 / Table 2); mAP does not depend on it")
    r.add_argument("--background", default="kept", choices=("kept", "removed"),
                   help="removed: every image's background is blacked out with its mask_path before "
                   "embedding (FPR Table 14; the generated and gallery tables need mask_path); default kept")
    r.add_argument("--batch-size", type=int, default=None, help="images per encoder forward (default: the "
                   "profile's retrieval.batch_size); memory, not results")
    r.add_argument("--checkpoint", default=None, help="checkpoint of the encoder (e.g. a NearID head folder)")
    r.add_argument("--out", default=None, help="write the per-method summary here (CSV; per-query rows beside it, "
                   "<name>_per_query.csv)")
    _common(r)

    t = sub.add_parser("train", help="train the NearID head (what notebook 03_train_nearid does)")
    t.add_argument("--data", default=None, help="dataset root (default data_dir(profile)/nearid)")
    t.add_argument("--out", default=None, help="checkpoint folder (default checkpoint_dir(profile)/nearid)")
    t.add_argument("--no-resume", action="store_true")
    t.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (resumable)")
    _common(t)

    p = sub.add_parser("report", help="render README.md in the profile's figures folder from its tables (what notebook 99_report does)")
    _common(p)

    d = sub.add_parser("dbpp-mh", help="DreamBench++ metric-to-human r (NearID Table 2, Table 1's DB++ column, "
                       "Figure 4) from per-image scores in the layout of the NearID authors' ratings folder",
                       description="DreamBench++ metric-to-human alignment: per scorer, category and method, the "
                       "Pearson r of the scorer's per-image scores with each human rater group (NearID Table 2, "
                       "Table 1's DB++ column, Figure 4), for the released scorers and your own.",
                       epilog=_DBPP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("ratings", metavar="RATINGS_DIR", help="the ratings folder (layout below)")
    d.add_argument("--scores", action="append", default=[], metavar="NAME=DIR",
                   help="your own scorer: a folder of <method>.json {image key: score} in the release's key "
                   "layout (below; repeatable)")
    d.add_argument("--out", required=True, help="CSV with one row per (scorer, category, method): scorer, "
                   "category, method, r, r_spread, n")
    _common(d)

    f = sub.add_parser("preflight", help="check everything a run reads or needs (mirror, datasets, splits, the "
                       "authors' release, environment, disk, GPUs) in seconds; exit 1 on any problem")
    f.add_argument("--allow-missing", nargs="+", default=[], metavar="REPO",
                   help="hub repositories you accept to be absent from the mirror (their tables are skipped)")
    _common(f, profile_default="paper")

    pl = sub.add_parser("plan", help="the paper run's resource plan on a machine: every GPU step's placement, memory "
                        "per GPU, items, hours and bytes; exit 1 naming a step the machine cannot hold")
    pl.add_argument("--gpus", default=None, metavar="COUNTxMODEL",
                    help="the machine, e.g. 8xA100-40GB, 8xA100-80GB, 8xH100, 1x24GB (default: the GPUs visible here)")
    pl.add_argument("--read-GBps", type=float, default=None, metavar="GB/S",
                    help="the token store's read rate (default: both 0.58, measured on the lent H100's disk, and 3)")
    _common(pl, profile_default="paper")
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

    from .sim import describe, similarity, write_similarities

    kw = {"checkpoint": args.checkpoint} if args.checkpoint else None
    df = similarity(args.a, args.b, args.encoder, profile=args.profile, batch_size=args.batch_size, encoder_kw=kw)
    with pd.option_context("display.width", 200, "display.max_colwidth", 80, "display.max_rows", 50):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(describe(df))
    if args.out:
        out = write_similarities(df, args.out)
        print(f"wrote {out} (provenance: {out.with_name(out.stem + '.meta.json').name})")
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
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    res = rank_generator(args.generated, args.gallery, encoder, references=args.references, method=args.method,
                         group_by=None if args.group_by.lower() == "none" else args.group_by, sim_to=args.sim_to,
                         background=args.background, tiny=cfg.backbone.tiny, encoder_kw=kw,
                         batch_size=args.batch_size or cfg.retrieval.batch_size)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(res.summary.to_string(index=False))
    lo, hi = res.summary.map_chance.min(), res.summary.map_chance.max()
    print(f"chance level: a random ranking of the same galleries scores mAP {lo:.4f}"
          + (f"-{hi:.4f} (per method: map_chance)" if hi - lo > 5e-5 else "") + "; pairwise similarity has no "
          "fixed chance level: compare methods with each other")
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
    from .paths import check_figures_profile, figures_dir
    from .report import profile_note, render_report

    cfg = get_profile(args.profile, over)
    figs = figures_dir(cfg.name)
    check_figures_profile(figs, cfg.name)   # a report titled with one profile over another's tables
    text = render_report(figs, profile_note=profile_note(cfg.name, cfg.backbone.name, cfg.world.source))
    print(f"wrote {atomic_write_text(figs / 'README.md', text)}")
    return 0


def _dbpp_mh(args, over) -> int:
    import pandas as pd

    from .io_utils import write_csv
    from .nearid.dbpp_released import incomplete_all4, mh_long, read_ratings

    extra = {}
    for kv in args.scores:
        name, sep, folder = kv.partition("=")
        if not sep or not name.strip() or not folder.strip():
            raise ValueError(f"--scores needs NAME=DIR, got {kv!r}")
        extra[name.strip()] = folder.strip()
    mh = mh_long(read_ratings(args.ratings, extra))
    short: dict[tuple, list[str]] = {}
    for scorer, cats in incomplete_all4(mh).items():
        short.setdefault(tuple(cats), []).append(scorer)
    for cats, scorers in short.items():       # one line per set of categories present
        print(f"nearid dbpp-mh: warning: all4 is the Fisher-z mean of {len(cats)} of the 4 categories "
              f"({', '.join(cats)}), not of all four, for {', '.join(scorers)}", file=sys.stderr)
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


def _plan(args, over) -> int:
    from .config import get_profile
    from .steps import Sizes, parse_gpus, plan_run, render_text, visible_gpus
    from .steps.plan import READ_RATES, totals

    cfg = get_profile(args.profile, over)
    gpus = parse_gpus(args.gpus) if args.gpus else visible_gpus()
    if not gpus:
        raise ValueError("no GPU visible here: name the machine with --gpus (e.g. --gpus 8xA100-40GB)")
    sizes = _release_sizes(cfg)
    ok = True
    for rate in ([args.read_GBps] if args.read_GBps else READ_RATES):
        plans = plan_run(gpus, sizes, cfg, read_GBps=rate)
        if rate == (args.read_GBps or READ_RATES[-1]):
            print(render_text(plans, gpus, sizes, rate))
        else:
            t = totals(plans)
            print(f"(at {rate:g} GB/s store reads: {t['wall_h']:,.1f} h wall, {t['gpu_h']:,.0f} GPU-hours)")
        ok = ok and not totals(plans)["problems"]
    return 0 if ok else 1


def _release_sizes(cfg):
    """The ledger's sizes counted from the release in the mirror (the preflight's data check, no
    image read), else the stated ones."""
    from .hub import hub_dir
    from .preflight.datasets import check_datasets
    from .preflight.findings import Report
    from .steps import Sizes

    mirror = hub_dir()
    if mirror is None or not mirror.is_dir() or cfg.world.source != "released":
        return Sizes.stated(cfg)
    rep = Report(cfg.name)
    check_datasets(cfg, rep)
    return Sizes.from_facts(rep.facts, cfg)


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
                    "dbpp-mh": _dbpp_mh, "preflight": _preflight, "plan": _plan}
        return commands[args.command](args, over)
    except (ConfigError, FileNotFoundError, ValueError, OSError, KeyError) as err:
        msg = " ".join(str(err).split())        # one line, as the README promises (no traceback)
        print(f"nearid {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
