"""Runners supply iterations to the shared loop (``loop.py``), one per way an algorithm trains
(``algos.registry`` names each algorithm's). Nothing is imported here: the registry imports a
runner's module only when a run needs it."""
