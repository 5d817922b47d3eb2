"""Compatibility shim: Finer-Personalization Rank lives in :mod:`nearid_lib.fpr` now."""
from .fpr import *  # noqa: F401,F403
from .fpr import __all__  # noqa: F401
