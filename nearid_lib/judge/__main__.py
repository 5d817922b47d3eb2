"""``python -m nearid_lib.judge ...``: judge a CSV of image pairs (:mod:`nearid_lib.judge.cli`)."""
from .cli import main

main()
