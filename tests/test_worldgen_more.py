"""worldgen: the other task generators, exports, datasets and the CLI surface."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from worldgen import tasks
from worldgen.datasets import WorldgenDataset
from worldgen.export import coco_keypoints, jsonl_line, write_davis
from worldgen.figures import ACTIONS
from worldgen.tasks import edit, meme, motion_edit, spatial


@pytest.mark.parametrize("name", tasks.NAMES)
def test_every_task_generates_json_records(name):
    mod = tasks.get(name)
    for seed in range(2):
        a, b = mod.generate(seed, mod.Config()), mod.generate(seed, mod.Config())
        line = jsonl_line(a.record)
        assert line == jsonl_line(b.record) and json.loads(line)["task"] == name


def test_edit_changes_exactly_one_thing():
    for seed in range(12):
        s = edit.generate(seed)
        src, tgt = s.record["source_world"], s.record["target_world"]
        k = s.record["edit"]["kind"]
        if k == "change_background":
            assert src["objects"] == tgt["objects"] and src["background"] != tgt["background"]
        else:
            assert src["background"] == tgt["background"]
            same = [o for o in src["objects"] if o in tgt["objects"]]
            assert len(same) >= len(src["objects"]) - 1 and src["objects"] != tgt["objects"]


def test_motion_edit_keeps_identity_and_targets_keypoints():
    for seed in range(5):
        s = motion_edit.generate(seed, motion_edit.Config(level=1 + seed % 3))
        r = s.record
        assert r["target_action"] in ACTIONS and r["source_action"] != r["target_action"]
        kp = np.asarray(r["target_keypoints"], np.float32)
        assert kp.shape == (s.worlds["target"].num_frames, 17, 3)
        ps, pt = s.worlds["source"].objects[0].person, s.worlds["target"].objects[0].person
        assert (ps.height, ps.thickness, ps.arm, ps.leg) == (pt.height, pt.thickness, pt.arm, pt.leg)


def test_meme_candidates_and_noisy_pairs():
    s = meme.generate(3, meme.Config(label_noise=0.0))
    r = s.record
    assert len(r["candidates"]) >= 8 and len(r["scores"]) == len(r["candidates"])
    for i, j, lab in r["pairs"]:
        assert lab == int(r["scores"][i] > r["scores"][j])
    noisy = meme.generate(3, meme.Config(label_noise=0.5)).record["pairs"]
    assert any(p != q for p, q in zip(noisy, r["pairs"]))


def test_spatial_answer_unique_in_region():
    for seed in range(4):
        r = spatial.generate(seed).record
        objs = {o["id"]: o for o in r["objects"]}
        a, t = objs[r["anchor_id"]], objs[r["target_id"]]
        assert sum((o["size"], o["shape"]) == (a["size"], a["shape"]) for o in objs.values()) == 1
        region = [o for o in objs.values() if o["id"] != a["id"] and spatial.in_region(a, o, r["relation"], 512)]
        assert [o["id"] for o in region if (o["size"], o["shape"]) == (t["size"], t["shape"])] == [t["id"]]
        assert r["options"][r["answer_index"]] == t["color"]


def test_dataset_shards_across_workers():
    ds = WorldgenDataset("vrs", n=5, seed=3, max_frames=8)
    items = list(ds)
    assert [i["index"] for i in items] == list(range(5))
    assert items[0]["video_frames"].shape == (8, 64, 64, 3) and items[0]["video_ids"].dtype == np.uint8
    from torch.utils.data import DataLoader

    got = sorted(x["index"] for x in DataLoader(WorldgenDataset("t2v", n=4, render=False), batch_size=None, num_workers=2))
    assert got == [0, 1, 2, 3]


def test_davis_and_coco_exports(tmp_path):
    s = motion_edit.generate(0)
    w = s.worlds["target"]
    write_davis(w, tmp_path, "seq")
    assert len(list((tmp_path / "JPEGImages" / "480p" / "seq").glob("*.jpg"))) == w.num_frames
    coco = coco_keypoints(w, stride=6)
    assert coco["categories"][0]["keypoints"][0] == "nose" and len(coco["annotations"][0]["keypoints"]) == 51


def test_cli_surface():
    from worldgen import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    args = p.parse_args(["vrs", "--n", "2", "-o", "x", "--split", "val", "--json"])
    assert args.task == "vrs" and args.split == "val" and args.size is None
    assert cli.run(p.parse_args(["vrs", "--n", "0", "-o", "x"])) == 2


def test_cli_writes_davis_tree_readable_by_core(tmp_path, capsys):
    import json

    from app.cli import main
    from core.masks import read_mask_folder
    from core.video import Video

    assert main(["worldgen", "vrs", "--n", "1", "--split", "test", "-o", str(tmp_path), "--davis", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    record = json.loads((tmp_path / "test.jsonl").read_text().splitlines()[0])
    clip = Video(tmp_path / record["files"]["video"])
    seq = tmp_path / "test" / "davis"
    frames = Video(seq / "JPEGImages" / "480p" / "000000_video")
    ids = read_mask_folder(seq / "Annotations" / "480p" / "000000_video")
    assert len(frames) == len(clip) == len(ids) and summary["n"] == 1
    assert record["target_id"] in set(np.unique(ids).tolist())
