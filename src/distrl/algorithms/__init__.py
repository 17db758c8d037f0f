"""Algorithms as packages: each folder here is one algorithm whole (its ``algo:`` section and
catalogue entry in ``config.py``, its networks, how it acts while collecting, its update and its
runner), found by ``algo.name`` through the one line naming its entry in the catalogue
(``algos.registry.ALGORITHMS``) and imported only when a run uses it."""
