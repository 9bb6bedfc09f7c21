"""``python -m training.vlm``: train the built-in VLM (see ``training.vlm.train.main``)."""

from training.common import run_script
from training.vlm.train import main

raise SystemExit(run_script(main))
