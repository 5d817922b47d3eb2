"""Tiny random-weight models of the real classes, written offline in the released repositories'
layouts: the fixtures of the tests, the dry run (:mod:`tools.paper_fixtures`) and the benchmarks.
They live outside ``nearid_lib``: no user's run loads them."""
