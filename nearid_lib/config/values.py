"""Typing and range checks of configuration overrides (:func:`nearid_lib.config.get_profile`):
strings from the command line / ``NEARID_SET`` are read as the field's type, other values are
type-checked, and every value is checked against its field's range or choices. Errors name the key."""
from __future__ import annotations

import numbers
import json
from typing import Any

__all__ = ["ConfigError", "ConfigValueError", "coerce"]


class ConfigError(KeyError):
    """Unknown profile, section or key. The message names the valid choices."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return str(self.args[0]) if self.args else ""


def _coerce(value: Any, current: Any, key: str) -> Any:
    """Coerce strings from the command line to the type of the current value; check the type of
    other values (a bool is no int, a fraction no int) and the field's range (:func:`_check_range`)."""
    if isinstance(value, str) and key.rpartition(".")[2] in _OPTIONAL_TEXT and \
            value.strip().lower() in ("none", "null", ""):
        return None
    return _check_range(key, _coerce_type(value, current, key))


def _coerce_type(value: Any, current: Any, key: str) -> Any:
    if isinstance(value, str) and not isinstance(current, str) and value.strip().lower() in ("none", "null"):
        return None  # optional fields (``int | None``) are reset with "none"
    if isinstance(value, str) and current is None:
        # an optional field (None by default): read the literal, leave other text as text
        low = value.strip().lower()
        if low in ("none", "null", ""):
            return None
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
        return value
    if not isinstance(value, str) or isinstance(current, str) or current is None:
        if isinstance(current, tuple) and isinstance(value, list):
            return tuple(value)
        return _check_type(value, current, key)
    if isinstance(current, bool):
        low = value.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigValueError(f"{key}: cannot read {value!r} as a boolean (true/false)")
    try:
        if isinstance(current, int):
            return int(value)
        if isinstance(current, float):
            return float(value)
    except ValueError:
        kind = "a whole number" if isinstance(current, int) else "a number"
        raise ConfigValueError(f"{key}: cannot read {value!r} as {kind} (current value {current!r})") from None
    if isinstance(current, tuple):
        return tuple(json.loads(value)) if value.startswith("[") else tuple(
            v.strip() for v in value.split(",") if v.strip())
    return value


class ConfigValueError(ConfigError, ValueError):
    """A config value of the wrong type or out of its field's range; the message names the key."""


def _check_type(value: Any, current: Any, key: str) -> Any:
    """A non-string override must have the field's type (ints for int fields, numbers for floats)."""

    if value is None or current is None or isinstance(current, str) and isinstance(value, str):
        return value
    if isinstance(current, bool):
        if not isinstance(value, (bool, numbers.Integral)) or value not in (0, 1):
            raise ConfigValueError(f"{key}: expected true/false, got {value!r}")
        return bool(value)
    if isinstance(current, int):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or int(value) != value:
            raise ConfigValueError(f"{key}: expected a whole number, got {value!r}")
        return int(value)
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigValueError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if isinstance(current, str) and not isinstance(value, str):
        raise ConfigValueError(f"{key}: expected text, got {value!r}")
    return value


# Ranges by field name (every section): (low, high, low_inclusive); None = unbounded.
_AT_LEAST_1 = {"batch_size", "epochs", "image_size", "num_heads", "n_workers", "grad_accum", "lora_rank",
               "lora_alpha", "head_hidden", "head_out", "out_dim", "top_k", "n_qualitative", "max_steps",
               "n_generated_per_id", "n_seeds", "mtg_repeat", "grid_levels", "n_classes",
               "out_resolution", "vlm_batch_size", "vlm_max_new_tokens", "vlm_max_ids", "cache_batch_size",
               "n_bootstrap", "kpca_ids", "qualitative_rows", "n_species", "ids_per_species", "refs_per_id",
               "gallery_per_id", "n_instances", "n_triplets", "checkpoint_every", "n_train_ids"}
_AT_LEAST_0 = {"warmup_steps", "eval_every", "seed", "retries", "aug_variants", "adapt_stages", "n_val_ids",
               "n_test_ids", "n_mtg_pairs", "n_grid_anchors", "n_graded_anchors", "weight_decay", "alpha", "beta",
               "lam", "oracle_margin", "circle_m", "view_strength", "png_compress", "gallery_view_strength",
               "gallery_bg_salience", "gallery_bg_blur"}
_ABOVE_0 = {"lr", "temperature", "mlp_ratio", "circle_gamma", "sinkhorn_blur", "siglip_scale"}
_FRACTION = {"gallery_dup_p", "gallery_spread", "token_dropout", "lora_dropout", "token_crop", "p_three_views", "mask_p_anchor",
             "mask_p_positive", "mask_p_distractor", "reject_unchanged_below", "reject_drift_above"}
_CHOICES = {"mixed_precision": ("no", "fp16", "bf16"), "dtype": ("float32", "float16", "bfloat16"),
            "disc_average": ("per_index", "flat"), "source": ("procedural", "released"),
            "split": ("train", "val", "test"), "parsing": ("authors", "strict"),
            "distractor_slots": ("per_source", "per_view")}
# Optional text fields (None by default in some profile) that "none" / "null" / "" reset to None
# even where a profile sets text: e.g. eval.vlm_judge=none turns the paper profile's judge off
_OPTIONAL_TEXT = {"vlm_judge", "mllm_judge", "prompt_file", "persam_sam", "dbpp_root", "split_dir"}


def _check_range(key: str, value: Any) -> Any:
    """Raise :class:`ConfigValueError` naming ``key`` when ``value`` is outside its field's range."""
    name = key.rpartition(".")[2]
    if value is None or isinstance(value, bool):
        return value
    if name in _CHOICES and isinstance(value, str) and value not in _CHOICES[name]:
        raise ConfigValueError(f"{key}={value!r}: expected one of {', '.join(_CHOICES[name])}")
    if not isinstance(value, (int, float)):
        return value
    rule = ((name in _AT_LEAST_1 and value < 1, ">= 1"), (name in _AT_LEAST_0 and value < 0, ">= 0"),
            (name in _ABOVE_0 and value <= 0, "> 0"), (name in _FRACTION and not 0 <= value <= 1, "in [0, 1]"))
    for bad, text in rule:
        if bad or value != value:                       # NaN is never in range
            raise ConfigValueError(f"{key}={value!r}: must be {text if bad else 'a number, not NaN'}")
    return value


coerce = _coerce
