"""The figures' style: the Okabe-Ito palette, one colour per method label (the same method has the
same colour in every figure), readable sizes, and the atomic PNG writers (:func:`savefig`, :func:`save`)."""
from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt

from ..io_utils import atomic_write

__all__ = ["OKABE_ITO", "apply_style", "method_color", "savefig", "save"]

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
_FIXED = {"nearid": "#0072B2", "ours": "#0072B2", "frozen": "#E69F00", "siglip2": "#E69F00",
          "oracle": "#000000", "clip": "#009E73", "dino": "#CC79A7", "qwen": "#D55E00", "vlm": "#D55E00",
          "vsm": "#56B4E9", "chance": "#999999", "@random": "#999999"}   # grey: random init, the chance reference
_ASSIGNED: dict[str, str] = {}


def apply_style() -> None:
    """Readable defaults (font sizes, grid, no top/right spines); call once per notebook."""
    mpl.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight", "font.size": 10,
        "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9, "legend.frameon": False,
        "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
        "axes.prop_cycle": mpl.cycler(color=OKABE_ITO),
    })


def method_color(label: str) -> str:
    """A stable colour for a method label: fixed for known families, else the next free palette
    colour (remembered for the session)."""
    low = label.lower()
    for key, col in _FIXED.items():
        if key in low:
            return col
    if label not in _ASSIGNED:
        used = set(_ASSIGNED.values())
        free = [c for c in OKABE_ITO if c not in used] or OKABE_ITO
        _ASSIGNED[label] = free[0]
    return _ASSIGNED[label]


def savefig(fig, path: str | Path, dpi: float | None = None, metadata: dict[str, str] | None = None) -> Path:
    """Write ``fig`` as PNG atomically (creating folders, tight bounding box) and close it; returns
    the path. ``dpi`` None: matplotlib's ``savefig.dpi``; ``metadata``: PNG text chunks (``Title``,
    ``Description``, ``Source``, ...), e.g. the commit and profile that made the figure."""
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight",
                                               metadata=metadata))
    plt.close(fig)
    return path


def save(fig, path: str | Path, dpi: float | None = None, metadata: dict[str, str] | None = None):
    """:func:`savefig` that returns the figure: a closed figure still renders when it is the value
    of a notebook cell, exactly once."""
    savefig(fig, path, dpi, metadata)
    return fig
