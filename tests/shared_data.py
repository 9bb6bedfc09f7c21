"""Paths to the real evaluation data in ../shared/data; tests skip with a reason when it is absent."""

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BBB = DATA / "bigbuckbunny_clip" / "bigbuckbunny.mp4"
DAVIS = DATA / "davis16_val_mini"
COCO_KPTS = DATA / "coco_val2017_kpts_mini" / "person_keypoints_mini.json"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real test data missing: {path} (expected the shared data folder beside the repo)")
    return path
