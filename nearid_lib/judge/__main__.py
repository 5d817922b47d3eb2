"""``python -m nearid_lib.judge ...``: judge a CSV of image pairs (:mod:`nearid_lib.judge.cli`)."""
from ..runtime.launch import exit_entry
from .cli import main

exit_entry(main)
