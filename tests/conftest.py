"""Shared test set-up: repo importable, nothing touches the network, tiny checkpoints built once."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="session")
def tiny_vlm_dirs(tmp_path_factory) -> dict[str, Path]:
    """Tiny random Qwen2.5-VL / Qwen3-VL / SmolVLM / Idefics3 checkpoints saved to disk, once per session."""
    from transformers.utils import logging as hf_logging

    from tiny_vlms import BUILDERS

    hf_logging.disable_progress_bar()
    root = tmp_path_factory.mktemp("tiny_vlms")
    return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.fixture(scope="session")
def tiny_tracker_dirs(tmp_path_factory) -> dict[str, Path]:
    """Tiny random SAM 2 / SAM 3 video checkpoints saved to disk, once per session."""
    from transformers.utils import logging as hf_logging

    from tiny_trackers import BUILDERS

    hf_logging.disable_progress_bar()
    root = tmp_path_factory.mktemp("tiny_trackers")
    return {name: build(root / name) for name, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run ~50x faster on one thread when the CPU is shared (OpenMP workers spin otherwise).
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
