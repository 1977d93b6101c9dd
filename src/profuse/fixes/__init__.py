"""Fixes applied to a copy of a model and measured: ``profuse.advise(model, inputs)``. Needs torch.

Beside ``studies/`` on the capture side of the pipeline: it profiles a model (``capture``), reads
the bundles back (``trace``) and finds fusion candidates (``analysis``), then patches deep copies
of the model and profiles them again. ``analysis/`` never imports this package. (It is not named
``advise`` because ``profuse.advise`` is the function, and a subpackage of that name would replace
it on the ``profuse`` module once imported.)
"""
from __future__ import annotations
