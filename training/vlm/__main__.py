"""``python -m training.vlm``: train the built-in VLM (see ``training.vlm.train.main``)."""

from training.vlm.train import main

raise SystemExit(main())
