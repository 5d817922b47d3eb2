"""The VLM judges of NearID-bench as bench encoders: the profile's judge (``eval.vlm_judge``, Table 1's
Qwen3-VL row) and Table 7's other model scales (``eval.vlm_scales``, NearID App. E.7: 4B and 8B), each
behind its declared gate and placed on the GPUs by its replica plan (:mod:`nearid_lib.judge.plan`).

A judge that cannot run -- none configured (``eval.vlm_judge=none``), weights not in the mirror,
its template (``judge.prompt_file``) missing, a model no group of GPUs holds -- is never an error
hours into a run: :func:`judge_encoders` returns it among the gated ones with the reason, and the
tables show its rows empty with that reason (:mod:`.unscored`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd
import torch

from .. import hub
from ..judge import VLMJudge, read_prompt_file
from ..judge.model import LazyJudge
from ..judge.plan import prompt_path, JUDGE_MODELS, judge_cost, judge_gate, scale_label
from ..judge.shards import judge_answers_dir
from ..steps.placement import device_kwargs, placement_plan
from .pair_encoder import PairBenchEncoder

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["judge_name", "judge_models", "judge_encoder", "judge_encoders", "judge_table"]

# the bench encoder names of the paper's judges (nearid.tables.PAPER_KEYS): "vlm" is Table 1's
# judge (the 30B, or any judge of a user's), the other scales are Table 7's rows
_SCALE_NAMES = {"4B": "vlm-4b", "8B": "vlm-8b"}


def judge_name(model: str) -> str:
    """The bench encoder name of judge ``model``: ``vlm-4b`` / ``vlm-8b`` for Table 7's smaller
    Qwen3-VL scales, ``vlm`` for any other (the 30B of Table 1, the tiny test judge, a user's)."""
    return _SCALE_NAMES.get(scale_label(model), "vlm")


def judge_models(cfg: Profile) -> list[str]:
    """Every judge the profile asks for: ``eval.vlm_judge`` (when set), then ``eval.vlm_scales``."""
    main = [cfg.eval.vlm_judge] if cfg.eval.vlm_judge else []
    return list(dict.fromkeys([*main, *cfg.eval.vlm_scales]))


def _judge_kwargs(cfg: Profile) -> dict:
    kw = {"max_new_tokens": cfg.eval.vlm_max_new_tokens, "batch_size": cfg.eval.vlm_batch_size,
          "parsing": cfg.judge.parsing}
    if cfg.judge.prompt_file:
        kw.update(prompt=read_prompt_file(cfg.judge.prompt_file), prompt_after_images=True)
    return kw


def judge_encoder(cfg: Profile, judge=None, device: str | None = None, model: str | None = None,
                  placement: dict | None = None, workers: Sequence[int] | None = None,
                  load: bool = True) -> PairBenchEncoder | None:
    """Judge ``model`` (default ``eval.vlm_judge``) as a bench encoder (None without one): its prompt
    (``judge.prompt_file``, the authors' template after the two images, or ours), its reading of the
    answers (``judge.parsing``), its cost cap ``eval.vlm_max_ids`` and its answers folder
    (:func:`judge_answers_dir`). ``placement``: :func:`~nearid_lib.judge.plan.device_kwargs` of this
    process's replica; ``load=False`` builds the judge without its weights (a process of a launch
    that judges nothing, ``workers`` naming the ranks that do); ``judge`` overrides the judge object
    (tests). Check :func:`~nearid_lib.judge.plan.judge_gate` first: a missing model raises here."""
    model = model or cfg.eval.vlm_judge
    if judge is None and not model:
        return None
    if judge is None:
        kw = _judge_kwargs(cfg)
        if model == "tiny":
            judge = VLMJudge.tiny(**kw)
        elif not load:
            judge = VLMJudge(None, None, name=model.split("/")[-1], **kw)
        else:
            where = dict(placement) if placement is not None else {
                "device": device or ("cuda" if torch.cuda.is_available() else "cpu")}
            judge = LazyJudge(VLMJudge(None, None, name=model.split("/")[-1], **kw),
                              lambda: VLMJudge.from_pretrained(model, **where, **kw))
    label = (f"VLM judge {judge.name} (score/10)" + (f", prompt {prompt_path(cfg.judge.prompt_file).name}"
                                                     if cfg.judge.prompt_file else ", our prompt")
             + (", the authors' answer reading" if getattr(judge, "parsing", "") == "authors" else ""))
    if cfg.eval.vlm_max_ids:
        label += f", first {cfg.eval.vlm_max_ids} ids/pairs only"
    benc = PairBenchEncoder(judge, judge_name(model or getattr(judge, "name", "vlm")), label,
                            max_ids=cfg.eval.vlm_max_ids, answers_dir=judge_answers_dir(cfg.name, judge))
    benc.workers = None if workers is None else tuple(workers)
    benc.model = model
    benc.skip_dbpp = model in cfg.eval.vlm_scales and model != cfg.eval.vlm_judge     # Table 7 only
    return benc


def judge_encoders(cfg: Profile, judge=None, rank: int = 0,
                   gpu_bytes: Sequence[int] | None = None) -> tuple[list[PairBenchEncoder], dict[str, str]]:
    """Every judge of the profile (:func:`judge_models`) that can run, as bench encoders placed for
    process ``rank`` (its replica's GPUs, or built without weights when it judges nothing), and
    ``{model: reason}`` for those that cannot (their gate, :func:`~nearid_lib.judge.plan.judge_gate`,
    a model no group of GPUs holds, or weights that fail to load: ``OSError``). ``judge`` stands in
    for the main judge's object (tests)."""
    out, gated = [], {}
    if judge is not None and not cfg.eval.vlm_judge:      # a judge object without a configured model
        out.append(judge_encoder(cfg, judge))
    for model in judge_models(cfg):
        why = None if (judge is not None and model == cfg.eval.vlm_judge) else \
            judge_gate(model, cfg.judge.prompt_file, hub.is_available)
        if why:
            gated[model] = why
            continue
        plan = None if model == "tiny" or judge is not None else placement_plan(model, hub.hub_dir(), gpu_bytes)
        if plan is not None and not plan.fits:
            gated[model] = plan.describe()
            continue
        on_gpu = plan is not None and bool(plan.replicas)
        workers = tuple(r[0] for r in plan.replicas) if on_gpu else None
        place = device_kwargs(plan, rank) if on_gpu else None
        try:
            out.append(judge_encoder(cfg, judge if model == cfg.eval.vlm_judge else None, model=model,
                                     placement=place, workers=workers, load=not on_gpu or place is not None))
        except OSError as err:          # transformers' word for "no such model / file"
            gated[model] = f"the judge's weights {model} could not be loaded ({type(err).__name__}: {err})"
    return out, gated


def judge_table(cfg: Profile, encoders: Sequence, results: Sequence) -> pd.DataFrame:
    """One row per judge the paper uses or the profile asks for (``04_vlm_judges``): ``model``,
    ``scale``, ``status`` (``scored`` / ``gated``), ``why`` (the gate's reason), ``plan`` (its replica
    plan over this machine's GPUs), ``coverage`` and ``n_judged`` (pairs asked), ``seconds``
    (scoring time in this run: reading answers when ``make judge`` ran first) and the projected
    GPU-seconds per 1,000 pairs with its basis (the resource ledger's, :func:`~nearid_lib.nearid.gpu_work.judge_cost`)."""
    cost = judge_cost()
    gated = dict(getattr(encoders, "gated", {}))
    by_name = {r.name: r for r in results}
    rows = []
    for model in dict.fromkeys([*judge_models(cfg), *JUDGE_MODELS]):
        name = judge_name(model)
        r = by_name.get(name) if any(getattr(b, "model", None) == model for b in encoders) else None
        plan = placement_plan(model, hub.hub_dir()) if model != "tiny" else None
        rows.append({"model": model, "scale": scale_label(model), "bench_name": name, "profile": cfg.name,
                     "status": "scored" if r is not None else "gated",
                     "why": "" if r is not None else gated.get(name, "not asked for"),
                     "plan": "judge: " + plan.describe() if plan is not None else "one device",
                     "coverage": r.coverage.get("coverage", np.nan) if r is not None else np.nan,
                     "n_judged": r.coverage.get("n_judged", 0) if r is not None else 0,
                     "seconds": r.seconds.get("total", np.nan) if r is not None else np.nan,
                     "gpu_seconds_per_1000_pairs": 1000 * cost.seconds,
                     "cost_basis": f"{cost.status} on {cost.on}: {cost.basis}"})
    return pd.DataFrame(rows)
