"""Typed profiles: ``smoke`` (CI, seconds), ``mini`` (offline laptop reproduction) and ``paper``.

One pipeline, three sizes: every notebook calls ``get_profile(PROFILE)`` and reads its knobs from
the returned :class:`Profile`. Only sizes, data sources and backbones differ between profiles.

Overrides use dotted keys and fail loudly on anything unknown::

    cfg = get_profile("mini", **{"train.lr": 3e-4, "world.n_train_ids": 100})
    cfg = get_profile("mini", overrides={"train.lr": 3e-4})

and, for papermill runs, from the environment: ``NEARID_SET="world.source=released;train.lr=3e-4"``
(applied first; explicit overrides win). The machine's share of a run is read from the environment
here too, once, into the ``runtime`` section (:func:`runtime_env`: ``NEARID_WORKERS``,
``NEARID_THREADS`` / ``OMP_NUM_THREADS``, which the Makefile exports; one thread under portable
numerics, :mod:`nearid_lib.runtime`); the library reads ``cfg.runtime.workers`` and
``cfg.runtime.threads``, never the variables.

Each section is a dataclass owned by one concept of the library (world, backbone, head, train,
eval, generate, retrieval, idsim, runtime). Lists and dicts live here, never in notebook parameters.
"""
from __future__ import annotations

import os
from dataclasses import fields, is_dataclass, replace
from typing import Any, Mapping

from .values import ConfigError, ConfigValueError, coerce as _coerce  # noqa: F401
from ..runtime import PORTABLE_THREADS, PORTABLE_VAR, portable_active

__all__ = [
    "PROFILES", "Profile", "WorldConfig", "BackboneConfig", "HeadConfig", "TrainConfig",
    "EvalConfig", "GenerateConfig", "RetrievalConfig", "IDSimConfig", "JudgeConfig", "RuntimeConfig", "get_profile",
    "profile_to_dict", "ConfigError", "env_overrides", "runtime_env", "with_overrides", "seeds_of", "TRAIN_PRESETS",
]


from .profile import Profile, RuntimeConfig  # noqa: F401
from .sections import (BackboneConfig, EvalConfig, GenerateConfig, HeadConfig,  # noqa: F401
                       IDSimConfig, JudgeConfig, RetrievalConfig, TrainConfig, WorldConfig)


def _smoke() -> Profile:
    return Profile(
        name="smoke",
        world=WorldConfig(
            image_size=64, n_classes=3, n_train_ids=12, n_val_ids=4, n_test_ids=6,
            object_frac=(0.5, 0.62), source_resolutions=(64, 96), n_mtg_pairs=8, shared_scene_p=0.5,
            n_grid_anchors=3, n_graded_anchors=2, grid_levels=3, n_species=2, ids_per_species=3, refs_per_id=2,
            gallery_per_id=3, gallery_dup_p=0.5, distractor_sources=("sharp", "soft", "soft_hr", "lifted", "hard", "edges"),
            train_sources=("sharp", "soft", "soft_hr"), n_workers=1,
        ),
        backbone=BackboneConfig(name="efficientnet-lite0", image_size=64, tiny=True, batch_size=16),
        head=HeadConfig(num_heads=2, mlp_ratio=2.0, token_dropout=0.0),
        train=TrainConfig(batch_size=8, epochs=1, max_steps=4, warmup_steps=1, checkpoint_every=2),
        # the tiny judge ("tiny") costs ~1 s per pair here: its path is covered by tests/test_judge.py
        eval=EvalConfig(alphas=(0.0, 0.5), betas=(0.0, 0.1), vlm_max_new_tokens=16, vlm_max_ids=2,
                        kpca_ids=4, qualitative_rows=2, n_seeds=2),
        retrieval=RetrievalConfig(gallery_sizes=(1, 2), subject_counts=(2, 3), n_generated_per_id=2,
                                  batch_size=16, n_qualitative=2, top_k=3),
        # smoke: a tiny random-init Dinov2 (the transformer LoRA path; tests cover the CNN path)
        idsim=IDSimConfig(backbone="dinov2-base", tiny=True, backbone_rows=(("efficientnet-lite1", None),),
                          batch_size=4, grad_accum=1, epochs=1, max_steps=2, n_bootstrap=50,
                          head_hidden=32, head_out=16, n_instances=8, n_triplets=12, aug_variants=0,
                          cache_batch_size=16, mllm_judge="tiny", mllm_max_pairs=4, persam_sam="tiny"),
        # procedural fills are rendered instances, never failed copies: only near-copies are
        # rejected (subtle "hard" distractors change < 2% of the masked pixels' value)
        generate=GenerateConfig(out_resolution=64, tiny=True, reject_unchanged_below=0.005),
    )


def _mini() -> Profile:
    return Profile(
        name="mini",
        # calibrated on the frozen encoder, val split only (150 identities), before any head was
        # trained on it, keeping NearID's protocol: every positive view in a scene of its own
        # (shared_scene_p = 0, Sec. 3.4). benchmarks/calibrate_world.py, lever P4 (docs/mini.md
        # "Calibration"): backgrounds out of focus (bg_blur), objects 80-95% of the frame, less pose
        # and lighting change, backgrounds at 25% of their contrast (bg_salience 0.25; P4 had 30%,
        # the recalibration below took 25%). MTG: 141 train pairs (with the 4x repeat, in the
        # paper's proportion to the NearID identities), 38 val, 201 test (SSR steps of 0.5 points).
        # The graded set (ID-Sim's Subjects2k / DreamBench++ analogue) has 16 edit-grid anchors of
        # its own. FPR galleries hold near-duplicates (20%) for the curated sampling rule to drop.
        # Sources are fill generators over the same edit kinds (nearid_lib.data.generators);
        # recalibrated on val, frozen only, with the targets unchanged and every generator's frozen SSR
        # in the paper's 12-67% (lever mini_gen2_bg0.25_mag0.7: backgrounds at 25% of their contrast,
        # 0.7x the distractors' colour shifts).
        world=WorldConfig(shared_scene_p=0.0, bg_blur=0.04, bg_salience=0.25, distractor_mag=0.7,
                          object_frac=(0.8, 0.95),
                          view_strength=0.2, n_val_ids=150, n_mtg_pairs=380, mtg_split=(0.37, 0.10, 0.53),
                          scene_reshoots=("val", "test"),     # CUTE easy's same-scene anchor, apart
                          n_graded_anchors=16, gallery_dup_p=0.2,
                          # the FPR galleries' own knobs (nearid_lib.data.galleries), 10 subjects per
                          # species as in the paper (Sec. 4.1), calibrated on their val galleries
                          # (benchmarks/calibrate_galleries.py, docs/mini.md "FPR galleries"): subjects
                          # 0.25 of the way from their species prototype; view, size and backgrounds at
                          # the NearID world's values of the calibration, now the galleries' own
                          ids_per_species=10, gallery_spread=0.25, gallery_view_strength=0.2, gallery_object_frac=(0.8, 0.95),
                          gallery_bg_salience=0.25, gallery_bg_blur=0.04),
        backbone=BackboneConfig(token_layer="blocks.4"),
        head=HeadConfig(num_heads=8, mlp_ratio=2.0, token_dropout=0.2),
        # tuned on the val split only (README, "The mini mechanism"); every row of every table
        # (main head and ablations) is trained with this one recipe
        train=TrainConfig(lr=3e-3, weight_decay=5e-2, warmup_steps=30, batch_size=64, epochs=12,
                          max_steps=648, token_crop=0.3, checkpoint_every=200),
        # each benchmark scores the backbone's class at random init beside the others: the chance
        # reference (a random network that beats the pretrained one says what an analogue rewards)
        eval=EvalConfig(encoders=("efficientnet-lite0", "nearid", "efficientnet-lite0@random")),
        # the mini world has 10 subjects x 10 gallery images per species, 40 subjects in all
        retrieval=RetrievalConfig(encoders=("efficientnet-lite0", "nearid", "efficientnet-lite0@random"),
                                  gallery_sizes=(1, 3, 5, 10), subject_counts=(3, 5, 7, 10)),
        generate=GenerateConfig(out_resolution=224, reject_unchanged_below=0.005,
                                verify_splits=("test",)),
        # ID-Sim mini budget (2 shared CPU cores): few instances; micro-batch 8 as in the paper but
        # accumulation 1 so that the few triplets still give enough optimizer steps
        # ID-Sim: three seeds of the model, its LoRA placement chosen on val among the last 1-3 stages
        # (docs/mini.md "ID-Sim in mini"); the training ablations at one seed, Table 3 and Supp. Table 8
        # only, for the time budget (every table at 3 seeds adds ~70 min on 2 cores)
        idsim=IDSimConfig(n_instances=150, n_triplets=240, epochs=3, grad_accum=1, n_seeds=3, ablation_seeds=1,
                          adapt_stages_choices=(1, 2, 3),
                          ablation_tables=("idsim_table3_data_ablation", "idsim_supp_table8_cls_patch")),
    )


def _paper() -> Profile:
    return Profile(
        name="paper",
        hf_offline=False,
        # the paper's 100 val / 500 test identities; NearID Table 5's four training sources
        world=WorldConfig(source="released", image_size=512, n_val_ids=100, n_test_ids=500,
                          distractor_sources=("Flux", "Flux_1024", "FluxC", "FluxC_1024", "PowerPaint",
                                              "Qwen", "Qwen_1328", "SDXL", "SDXL_1024"),
                          train_sources=("Flux", "Flux_1024", "Qwen", "Qwen_1328")),
        backbone=BackboneConfig(name="siglip2-so400m-patch14-384", image_size=384, dtype="float16"),
        head=HeadConfig(num_heads=16, mlp_ratio=3.7361111, out_dim=1152, token_dropout=0.0),
        train=TrainConfig(mixed_precision="fp16", token_store="int8"),
        eval=EvalConfig(
            # three seeds per row: the 60 runs of the ablation suite train in 18 batch streams
            # (nearid.group), ~33 TB of token-store reads, ~3 h at 3 GB/s on one node
            # (benchmarks/results/sweep_plan.md, a projection); the paper reports one run per row
            n_seeds=3,
            # both readouts of the frozen SigLIP2 (MAP head: NearID/MTG; mean of patch tokens: DB++)
            encoders=("clip-vit-l14", "dinov2-large", "siglip2-so400m-patch14-384",
                      "siglip2-so400m-patch14-384-meanpool", "nearid", "nearid-release"),
            vlm_judge="Qwen/Qwen3-VL-30B-A3B-Instruct", dbpp_root=None, dbpp_human=True, dbpp_standin=False,
            vlm_scales=("Qwen/Qwen3-VL-4B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"),   # Table 7 (App. E.7)
        ),
        generate=GenerateConfig(
            backends=("sdxl", "flux_fill", "flux_canny", "qwen_controlnet", "powerpaint"),
            # the 9 sources are released (notebook 01 reads them); regeneration is opt-in per
            # source (NEARID_SET=generate.sources=Flux,...), see nearid_lib.generate.plan
            sources=(),
            mixed_precision="bf16", batch_size=4,
        ),
        retrieval=RetrievalConfig(
            # MiewID: the authors' msv2 (the paper's row) and msv3 beside it (an extra row); both remote code
            encoders=("clip-vit-b32", "dinov2-base", "bioclip2", "miewid", "miewid-msv3", "nearid"),
            gallery_sizes=(1, 5, 10, 20), subject_counts=(10, 15, 25, 100),
            generate_methods=("dreambooth", "ip_adapter", "ip_adapter_plus", "flux_kontext", "diptych"),
            gallery_rule="authors",
        ),
        idsim=IDSimConfig(backbone="dinov3-vitl16", image_size=448, epochs=3, aug_variants=0,
                          backbone_rows=(("dinov3-vitl16", 224), ("dinov2-large", None)),
                          mllm_judge="Qwen/Qwen3-VL-30B-A3B-Instruct", persam_sam="facebook/sam-vit-huge",
                          source="released"),
        # the authors' judge template from their GitHub release (the Qwen3-VL rows as they ran them)
        judge=JudgeConfig(prompt_file="{downloads}/NearID/evaluation/vl_template_v2.txt"),
    )


PROFILES = {"smoke": _smoke, "mini": _mini, "paper": _paper}

# Named training recipes, chosen with the override ``train.recipe=<name>`` (applied before every
# other override, which then wins). "paper" is the profile's own recipe (NearID Table 5 / App. E.4:
# training sources Flux, Flux_1024, Qwen, Qwen_1328; role-aware masking; per-slot augmentation), the
# default. "r7" is the NearID authors' training script, the recipe of their released weights
# (scripts/train_example.sh and docs/TRAINING.md of Gorluxor/NearID at 1a2cc71: --loss_config
# infonce_ext:1.0, --data.neg_paths NearID-{Flux,SDXL,Qwen,PowerPaint}, batch 128, 11 epochs, lr 1e-4,
# fp16, MTG x4; their data defaults: no masking, no augmentation, one distractor per view); every
# flag's mapping and what stays uncertain: docs/protocol.md, "The authors' recipe (R7)".
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {},
    "r7": {"train.sources": ("Flux", "SDXL", "Qwen", "PowerPaint"), "train.loss": "nearid", "train.alpha": 0.5,
           "train.temperature": 0.07, "train.batch_size": 128, "train.epochs": 11, "train.max_steps": None,
           "train.lr": 1e-4, "train.weight_decay": 1e-4, "train.warmup_steps": 100, "train.mixed_precision": "fp16",
           "train.use_nearid": True, "train.use_mtg": True, "train.mtg_repeat": 4, "train.mask_p_anchor": 0.0,
           "train.mask_p_positive": 0.0, "train.mask_p_distractor": 0.0, "train.augment": False,
           "train.distractor_slots": "per_view", "head.init_from_backbone": True, "head.token_dropout": 0.0},
}


# --------------------------------------------------------------------------- overrides
def _apply(obj: Any, key: str, value: Any, full_key: str) -> Any:
    head, _, rest = key.partition(".")
    names = [f.name for f in fields(obj)]
    if head not in names:
        where = type(obj).__name__
        raise ConfigError(
            f"unknown config key {full_key!r}: {where} has no field {head!r}; valid: {', '.join(names)}")
    current = getattr(obj, head)
    if rest:
        if not is_dataclass(current):
            raise ConfigError(f"unknown config key {full_key!r}: {head!r} is a value, not a section")
        return replace(obj, **{head: _apply(current, rest, value, full_key)})
    if is_dataclass(current):
        raise ConfigError(f"{full_key!r} is a section; set one of its fields, e.g. {full_key}.<field>")
    return replace(obj, **{head: _coerce(value, current, full_key)})


def get_profile(name: str, overrides: Mapping[str, Any] | None = None, **kw: Any) -> Profile:
    """The resolved :class:`Profile` ``name`` with dotted-key ``overrides`` applied, on top of
    the environment's (:func:`runtime_env`, then ``NEARID_SET``: :func:`env_overrides`).

    Raises :class:`ConfigError` naming the valid profiles or keys on anything unknown."""
    if name not in PROFILES:
        raise ConfigError(f"unknown profile {name!r}; valid profiles: {', '.join(PROFILES)}")
    prof = PROFILES[name]()
    merged: dict[str, Any] = runtime_env()
    merged.update(env_overrides())
    merged.update(overrides or {})
    merged.update(kw)
    return with_overrides(prof, merged)


def with_overrides(prof: Profile, overrides: Mapping[str, Any]) -> Profile:
    """``prof`` with dotted-key ``overrides`` applied on top (same checks as :func:`get_profile`);
    ``train.recipe`` applies its :data:`TRAIN_PRESETS` entry first, the other overrides after it."""
    overrides = dict(overrides)
    if "train.recipe" in overrides:
        name = str(overrides.pop("train.recipe")).strip()
        if name not in TRAIN_PRESETS:
            raise ConfigError(f"unknown train.recipe {name!r}; valid: {', '.join(TRAIN_PRESETS)}")
        for key, value in TRAIN_PRESETS[name].items():
            prof = _apply(prof, key, value, f"train.recipe={name}: {key}")
        prof = _apply(prof, "train.recipe", name, "train.recipe")
    for key, value in overrides.items():
        prof = _apply(prof, key, value, key)
    return prof


def env_overrides(var: str = "NEARID_SET") -> dict[str, str]:
    """Dotted-key overrides from the environment, e.g.
    ``NEARID_SET="world.source=released; eval.dbpp_standin=false"`` (``;`` or newlines separate).

    This is how a papermill run changes a list/section value without editing a notebook (notebook
    parameters stay scalars); the values are typed and checked like any other override."""

    text = os.environ.get(var, "").strip()
    out: dict[str, str] = {}
    for part in text.replace("\n", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{var}: cannot read {part!r}; expected key=value (e.g. train.lr=3e-4)")
        out[key.strip()] = value.strip()
    return out


# the environment variables behind the runtime section, first set one wins
RUNTIME_VARS = {"runtime.workers": ("NEARID_WORKERS",), "runtime.threads": ("NEARID_THREADS", "OMP_NUM_THREADS"),
                "runtime.tune_malloc": ("NEARID_TUNE_MALLOC",)}


def runtime_env(env: Mapping[str, str] | None = None) -> dict[str, int | bool]:
    """The ``runtime`` overrides the environment sets (``env``: default ``os.environ``):
    ``runtime.workers`` from ``NEARID_WORKERS``, ``runtime.threads`` from ``NEARID_THREADS``, else
    ``OMP_NUM_THREADS``, ``runtime.tune_malloc`` from ``NEARID_TUNE_MALLOC`` (0 or 1). Unset or empty variables set nothing (the section's defaults: one worker,
    every core); a value that is not a positive whole number raises naming the variable.

    Under portable numerics (``NEARID_PORTABLE``, :mod:`nearid_lib.runtime`) the thread count is
    theirs, :data:`~nearid_lib.runtime.PORTABLE_THREADS`: ``OMP_NUM_THREADS`` is not read, and a
    ``NEARID_THREADS`` asking for another count raises naming the switch."""

    env = os.environ if env is None else env
    out: dict[str, int | bool] = {}
    for key, names in RUNTIME_VARS.items():
        for var in names:
            value = str(env.get(var, "")).strip()
            if value and key == "runtime.tune_malloc":
                if value not in ("0", "1"):
                    raise ConfigValueError(f"{var}={value!r}: expected 0 or 1 ({key})")
                out[key] = value == "1"
                break
            if value:
                if not value.isdigit() or int(value) < 1:
                    raise ConfigValueError(f"{var}={value!r}: expected a positive whole number ({key})")
                out[key] = int(value)
                break
    if portable_active(env):
        asked = str(env.get("NEARID_THREADS", "")).strip()
        if asked and int(asked) != PORTABLE_THREADS:
            raise ConfigValueError(f"NEARID_THREADS={asked!r}, but portable numerics ({PORTABLE_VAR}) run "
                                   f"{PORTABLE_THREADS} thread per process so that every machine gives the same "
                                   f"bits: set {PORTABLE_VAR}=0 to run {asked} threads")
        out["runtime.threads"] = PORTABLE_THREADS
    return out


def profile_to_dict(prof: Profile) -> dict[str, Any]:
    """Plain JSON-able dict of a profile (tuples become lists)."""
    return prof.to_dict()


def seeds_of(cfg: Profile) -> list[int]:
    """The training seeds of a profile's tables: ``eval.n_seeds`` consecutive seeds from ``cfg.seed``."""
    return [int(cfg.seed) + i for i in range(max(1, int(cfg.eval.n_seeds)))]
