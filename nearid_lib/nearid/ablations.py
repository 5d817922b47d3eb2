"""The rows of NearID's training tables as data (Tables 1/3/10 losses, 8 alpha, 9 beta, 6 data).

Every row is the main recipe (the profile's ``train`` section: steps, schedule, data, seeds) with
only the row's overrides changed, so a row that *is* the main configuration shares its runs: Table
1's NearID row, Table 3's L_NearID row and Table 8's alpha = 0.5 row are one configuration (key
``nearid``), and Table 9's beta = 0 row is Table 8's alpha = 1 row (both L_NearID at alpha = 1, as
in the paper, where the two rows print the same numbers).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..config.values import ConfigValueError
from .losses import REGISTRY, loss_spec
from .sweep import RowSpec

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["MAIN", "main_row", "loss_rows", "alpha_rows", "beta_rows", "data_rows", "table_rows", "alpha_key",
           "beta_key"]

MAIN = "nearid"


def _is_main(cfg: Profile, **values) -> bool:
    return all(getattr(cfg.train, k) == v for k, v in values.items())


def alpha_key(alpha: float) -> str:
    return f"alpha.{float(alpha)}"


def beta_key(beta: float) -> str:
    return f"beta.{float(beta)}"


def main_row(cfg: Profile, paper_id: str = "nearid") -> RowSpec:
    """The main head (the profile's recipe, no override)."""
    return RowSpec(MAIN, f"NearID MAP head ({cfg.train.loss}, alpha={cfg.train.alpha})", {},
                   aliases=(f"loss.{cfg.train.loss}", alpha_key(cfg.train.alpha), "data.nearid_full"),
                   paper_id=paper_id)


def loss_rows(cfg: Profile) -> list[RowSpec]:
    """Table 3 / Table 10: every training objective of ``eval.ablation_losses``, each row's table id
    from the loss registry (:mod:`.losses`). A name that is no registered loss raises at once,
    before any row is trained."""
    bad = [loss for loss in cfg.eval.ablation_losses if loss not in REGISTRY]
    if bad:
        raise ConfigValueError(f"eval.ablation_losses: unknown loss(es) {', '.join(map(repr, bad))}; "
                               f"registered: {', '.join(REGISTRY)}")
    specs = [loss_spec(loss) for loss in cfg.eval.ablation_losses]
    return [main_row(cfg, s.row_id) if _is_main(cfg, loss=s.name) else
            RowSpec(f"loss.{s.name}", s.name, {"train.loss": s.name}, paper_id=s.row_id)
            for s in specs]


def alpha_rows(cfg: Profile) -> list[RowSpec]:
    """Table 8: L_NearID with each ranking weight of ``eval.alphas``."""
    return [main_row(cfg) if _is_main(cfg, loss="nearid", alpha=a) else
            RowSpec(alpha_key(a), f"L_NearID alpha={a}", {"train.loss": "nearid", "train.alpha": a},
                    aliases=(beta_key(0.0),) if float(a) == 1.0 else ())
            for a in cfg.eval.alphas]


def beta_rows(cfg: Profile) -> list[RowSpec]:
    """Table 9: L_NearID + beta * L_coh at alpha = 1 for each beta of ``eval.betas``; beta = 0 is the
    alpha = 1 row of Table 8 (no cohesion term at all)."""
    rows = []
    for b in cfg.eval.betas:
        if float(b) == 0.0:
            rows.append(RowSpec(alpha_key(1.0), "L_NearID alpha=1 (no cohesion)",
                                {"train.loss": "nearid", "train.alpha": 1.0}, aliases=(beta_key(0.0),)))
        else:
            rows.append(RowSpec(beta_key(b), f"L_NearID + {b} L_coh, alpha=1",
                                {"train.loss": "nearid_cohesion", "train.alpha": 1.0, "train.beta": b}))
    return rows


def table_rows(cfg: Profile, data: NearIDData) -> list[RowSpec]:
    """Every trained row of NearID Tables 1, 3, 6, 8, 9 and 10 in table order, the main head first
    (a run shared by several tables appears once per table: the same key and configuration)."""
    return [main_row(cfg), *loss_rows(cfg), *alpha_rows(cfg), *beta_rows(cfg), *[r for r, *_ in data_rows(cfg, data)]]


def data_rows(cfg: Profile, data: NearIDData) -> list[tuple[RowSpec, str, int, bool]]:
    """Table 6: ``(row, paper row_id, n NearID sources, MTG used)``. MTG only upsamples MTG 8x (the
    paper's step-count match; every row runs the recipe's number of steps anyway); one source only
    uses the first training source, like the paper's FLUX.1-Fill."""
    ts = list(cfg.train.sources or data.train_sources)
    one = ts[0]
    return [
        (main_row(cfg, "nearid_full"), "nearid_full", len(ts), True),
        (RowSpec("data.nearid_only", "NearID only", {"train.use_mtg": False}, paper_id="nearid_only"),
         "nearid_only", len(ts), False),
        (RowSpec("data.mtg_only", "MTG only (8x)", {"train.use_nearid": False, "train.mtg_repeat": 8},
                 paper_id="mtg_only"), "mtg_only", 0, True),
        (RowSpec("data.nearid1_only", f"NearID source '{one}' only", {"train.use_mtg": False, "train.sources": (one,)},
                 paper_id="nearid1_only"), "nearid1_only", 1, False),
    ]
