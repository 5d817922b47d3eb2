"""Figure styles shared by the notebooks: one colour-blind-safe palette (Okabe-Ito), readable sizes,
and the NearID figure types (KernelPCA panels, attention overlays, ECDFs, score grids, radar).

Every function returns the matplotlib ``Figure``; :func:`savefig` writes it atomically as PNG and
:func:`save` does the same and returns the figure (what ``Run.figure`` uses, so a notebook cell ending
with it shows the figure inline). Nothing here selects a backend: notebooks keep the inline one.
Colours are assigned per *method label* so the same method has the same colour in every figure.
"""
from __future__ import annotations

from .charts import (anchor_distributions, bar_compare, bench_overview, ecdf_plot, kernel_pca_panels,  # noqa: F401
                     metric_bars, radar_plot)
from .grids import attention_overlay_grid, image_grid, score_grid  # noqa: F401
from .style import OKABE_ITO, apply_style, method_color, save, savefig  # noqa: F401

__all__ = ["OKABE_ITO", "apply_style", "method_color", "savefig", "save", "kernel_pca_panels",
           "attention_overlay_grid", "ecdf_plot", "score_grid", "radar_plot", "bar_compare",
           "anchor_distributions", "image_grid"]

