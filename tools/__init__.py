"""Tools of this repository that are not part of the ``nearid_lib`` library: the dry run's fixtures
in the released layouts (:mod:`tools.paper_fixtures`), used by the Makefile and the tests. Run them
from the repository root (``python -m tools.paper_fixtures ...``)."""
