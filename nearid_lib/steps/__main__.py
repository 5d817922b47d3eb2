"""``python -m nearid_lib.steps run TARGET ...``: :func:`nearid_lib.steps.runner.main`."""
from .runner import main

if __name__ == "__main__":
    from ..runtime.launch import exit_entry

    exit_entry(main)
