"""``python -m nearid_lib ...``: the ``nearid`` command (:mod:`nearid_lib.cli`)."""
from .cli import main

raise SystemExit(main())
