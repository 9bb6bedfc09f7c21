"""The one argument parser class of every command line here (``atelier``, ``python -m training.X``, benchmarks).

argparse takes any unambiguous prefix of a long option by default, so ``--trust`` or ``--tr`` switched remote
code on; an option is only ever its full name here. Subparsers inherit the class (``add_subparsers`` builds them
with ``type(parent)``), so every verb of ``atelier`` is covered by construction.
"""

from __future__ import annotations

import argparse


class StrictParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` without abbreviations."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
