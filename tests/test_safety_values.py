"""Values that used to slip through or end in a traceback (issue 46): NaN and infinities for every float setting,
string booleans in manifests, config values of the wrong type in a saved ``pipeline.json``, images over the
pixel budget, and a handful of one-off cases (worldgen ``--level``, ``score mcq`` on a list of numbers, a
deeply nested manifest line, a 100,000-character question, ``train --steps 0``).

Every registered verb gets each check by construction (its settings and config fields are read from its
``PipelineApp``); each asserts exit 1 or 2, no traceback, and a message naming the argument."""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import typing
import zlib

import numpy as np
import pytest

from app.batch import run_batch
from core.video import write_video
from pipelines.registry import apps
from test_malformed_inputs import assert_clean, figure_clips, good_media, media_input, run_cli, to_argv, valid_args, with_media

pytestmark = pytest.mark.usefixtures("one_thread")

VERBS = sorted(apps())
NOT_FINITE = (float("nan"), float("inf"), float("-inf"))


def png_header(path, width: int, height: int):
    """A PNG that is only its signature, header and end: it claims ``width x height`` in 69 bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
                     + chunk(b"IEND", b""))
    return path


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("safety")
    frames = np.zeros((16, 32, 32, 3), np.uint8)
    frames[:, 8:16, 8:16] = 200
    large = np.zeros((2, 128, 128, 3), np.uint8)
    large[:, 32:64, 32:64] = 200
    return {"good": write_video(d / "good.mp4", frames, fps=10), "large": {"good": write_video(d / "large.mp4", large, fps=10)},
            "bomb": png_header(d / "bomb.png", 20000, 20000), "dir": d, "figure": figure_clips(d)}


# the cheapest settings of the verbs whose valid run would otherwise take seconds (kept only where the verb has them)
FAST = {"steps": 1, "num_frames": 2, "planning_steps": 1, "denoising_steps": 1, "num_memes": 1, "num_paths": 0,
        "max_rounds": 1, "meme_size": 64}


def fast_args(app, media) -> dict:
    names = {s.name for s in app.settings()}
    return {**valid_args(app, good_media(app, media)), **{k: v for k, v in FAST.items() if k in names}}


def float_settings(app):
    return [s for s in app.settings() if s.type is float and not s.pair]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def batch_records(tmp_path, items: list[dict]) -> dict[str, dict]:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")  # NaN / Infinity as JSON writes them
    run_batch(manifest, tmp_path / "out", progress=False)
    lines = (tmp_path / "out" / "status.jsonl").read_text().splitlines()
    return {json.loads(line)["id"]: json.loads(line) for line in lines}


def assert_failed(rec: dict, name: str) -> None:
    assert rec["status"] == "failed" and "traceback" not in rec and "\n" not in rec["error"], rec
    assert name in rec["error"], (name, rec["error"])


# --------------------------------------------------------------------------- NaN and infinities


@pytest.mark.parametrize("verb", VERBS)
def test_every_float_setting_refuses_nan_and_infinities_on_the_cli(verb, media, capsys):
    app = apps()[verb]
    base = to_argv(app, valid_args(app, good_media(app, media)))
    assert float_settings(app) or verb == "reason", "every verb but reason declares float settings"
    for s in float_settings(app):
        for value in ("nan", "inf", "-inf", "NaN", "1e999"):
            code, err = run_cli([*base, f"{flag(s.name)}={value}"], capsys)
            assert_clean(code, err, flag(s.name))
            assert "finite" in err, err


@pytest.mark.parametrize("verb", VERBS)
def test_every_float_setting_refuses_nan_and_infinities_in_a_manifest(verb, media, tmp_path):
    app = apps()[verb]
    base = valid_args(app, good_media(app, media))
    items = [{"id": f"{s.name}-{i}", "verb": verb, "args": {**base, s.name: v}}
             for s in float_settings(app) for i, v in enumerate([*NOT_FINITE, "nan"])]
    records = batch_records(tmp_path, items)
    for item in items:
        assert_failed(records[item["id"]], item["id"].rsplit("-", 1)[0])


# --------------------------------------------------------------------------- booleans


STRING_BOOLEANS = ("false", "no", "0", "yes", "true", "False")


@pytest.mark.parametrize("verb", VERBS)
def test_string_booleans_in_a_manifest_fail_naming_the_key(verb, media, tmp_path):
    app = apps()[verb]
    base = fast_args(app, media)
    keys = ["trust_remote_code", "progress"] + [s.name for s in app.settings() if s.type is bool]
    items = [{"id": f"{key}-{i}", "verb": verb, "args": {**base, key: value}}
             for key in keys for i, value in enumerate([*STRING_BOOLEANS, 0, 1, []])]
    # a real JSON false works (and remote code stays off)
    items.append({"id": "json-false", "verb": verb, "args": {**base, "trust_remote_code": False, "progress": False}})
    records = batch_records(tmp_path, items)
    for item in items[:-1]:
        assert_failed(records[item["id"]], item["id"].rsplit("-", 1)[0])
    assert records["json-false"]["status"] == "ok", records["json-false"]


def test_the_strict_parser_and_run_options():
    from app.runner import build
    from core.errors import InputError
    from core.values import parse_bool
    from pipelines.registry import parse_run_option

    assert parse_bool("x", True) is True and parse_bool("x", np.bool_(False)) is False
    for value in ("false", "no", "0", "", 0, 1, None, [], "true"):
        with pytest.raises(InputError, match="invalid x="):
            parse_bool("x", value)
    for key, value in (("pipeline", 5), ("device", ["cpu"]), ("dtype", 16), ("trust_remote_code", "false")):
        with pytest.raises(InputError, match=key):
            parse_run_option(key, value)
    with pytest.raises(InputError, match="trust_remote_code"):  # build() itself never applies bool() to a string
        build(apps()["reason"], {}, {"trust_remote_code": "no"}, {})


# --------------------------------------------------------------------------- config values of the wrong type


def wrong_values(hint) -> list:
    """Values of the wrong type for a field annotated ``hint``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if args else hint
    if typing.get_origin(base) is tuple:
        return ["lots", [1, "x"], [1, 2, 3]]
    return {bool: ["false", 0], int: ["lots", 2.5, True], float: ["lots", True, float("nan")], str: [5, ["a"]]}[base]


@pytest.mark.parametrize("verb", VERBS)
def test_every_config_field_of_the_wrong_type_in_pipeline_json(verb, media, tmp_path, capsys):
    from core.errors import InputError
    from pipelines.base import config_from_dict

    app = apps()[verb]
    cls = app.pipeline_class
    saved = cls.build(defaults=app.defaults).save_pretrained(tmp_path / "pipe")
    index_path = saved / "pipeline.json"
    index = json.loads(index_path.read_text())
    hints = typing.get_type_hints(cls.config_class)
    args = fast_args(app, media)
    # the inputs only: a setting on the command line would override the value under test
    inputs_only = to_argv(app, {i.name: args[i.name] for i in app.inputs})
    for f in dataclasses.fields(cls.config_class):
        values = wrong_values(hints[f.name])
        for value in values:  # every value through the loader's config check ...
            with pytest.raises(InputError, match=f"config.{f.name}="):
                config_from_dict(cls.config_class, {**index["config"], f.name: value}, "pipeline.json config")
        # ... and the first through the whole CLI (each run loads the components, a fraction of a second)
        index_path.write_text(json.dumps({**index, "config": {**index["config"], f.name: values[0]}}))
        code, err = run_cli([*inputs_only, "--pipeline", str(saved)], capsys)
        assert code == 2, err
        assert_clean(code, err, f"config.{f.name}")
    index_path.write_text(json.dumps(index))
    code, err = run_cli([*to_argv(app, args), "--pipeline", str(saved), "--json"], capsys)  # the untouched index runs
    assert code == 0, err


@pytest.mark.parametrize("verb", VERBS)
def test_build_and_replace_check_types_too(verb):
    from core.errors import InputError

    app = apps()[verb]
    cls = app.pipeline_class.config_class
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        for value in wrong_values(hints[f.name]):
            with pytest.raises(InputError, match=f.name):
                dataclasses.replace(cls(), **{f.name: value})
    # an int fits a float field; None fits an optional one
    for f in dataclasses.fields(cls):
        hint, bounds = hints[f.name], f.metadata.get("range") or (None, None)
        if float in (hint, *typing.get_args(hint)):
            whole = 0 if bounds[0] is None else math.ceil(bounds[0])
            if bounds[1] is None or whole <= bounds[1]:
                assert getattr(dataclasses.replace(cls(), **{f.name: whole}), f.name) == whole
        if type(None) in typing.get_args(hint):
            dataclasses.replace(cls(), **{f.name: None})


# --------------------------------------------------------------------------- images over the pixel budget


IMAGE_VERBS = [v for v in VERBS if any(i.kind in ("video", "image", "images") for i in apps()[v].inputs)]


@pytest.mark.parametrize("verb", IMAGE_VERBS)
def test_an_image_over_the_pixel_budget_is_refused_by_every_image_verb(verb, media, capsys):
    app = apps()[verb]
    base = valid_args(app, good_media(app, media))
    code, err = run_cli(to_argv(app, with_media(app, base, media["bomb"])), capsys)
    assert_clean(code, err, media["bomb"].name)
    assert "178,956,970" in err and "400,000,000" in err, err
    assert media_input(app) is not None


def test_video_probe_and_masks_refuse_an_image_over_the_budget(media, tmp_path, capsys, monkeypatch):
    from PIL import Image

    from core.errors import MediaError
    from core.masks import read_palette_png
    from core.video import Video

    code, err = run_cli(["video", "probe", str(media["bomb"]), "--json"], capsys)
    assert_clean(code, err, media["bomb"].name)
    with pytest.raises(MediaError, match="bomb.png"):
        read_palette_png(media["bomb"])
    # the budget holds on its own, even where PIL's own limit was lifted: the size is named from the header
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    with pytest.raises(MediaError, match=r"20000x20000 image \(400,000,000 pixels\)"):
        Video(media["bomb"])
    # 13,500 x 13,500 (just over the budget) as a real 1-bit PNG: 22 KB on disk
    monkeypatch.undo()
    real = tmp_path / "scan.png"
    Image.new("1", (13_500, 13_500)).save(real)
    code, err = run_cli(["video", "probe", str(real)], capsys)
    assert_clean(code, err, "scan.png")


# --------------------------------------------------------------------------- one-off cases


def test_worldgen_level_outside_its_range(tmp_path, capsys):
    from worldgen.cli import make_config

    for level in ("9", "0", "-1"):
        code, err = run_cli(["worldgen", "t2v", "-o", str(tmp_path / "wg"), "--n", "1", f"--level={level}"], capsys)
        assert_clean(code, err, "--level")
    for task in ("t2v", "edit", "longqa", "spatial"):
        with pytest.raises(ValueError, match="--level"):
            make_config(task, level=9)


def test_score_mcq_needs_objects(tmp_path, capsys):
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2, 3]")
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"question_id": "1", "label": "A"}\n"just text"\n')
    options = tmp_path / "options.jsonl"
    options.write_text('{"question_id": "1", "label": "A", "options": 5}\n')
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000)
    good = tmp_path / "good.jsonl"
    good.write_text('{"question_id": "1", "label": "A"}\n')
    for path, names in ((numbers, "numbers.json record 1"), (lines, "lines.jsonl record 2"),
                        (options, "record 1 options"), (nested, "nested.json")):
        code, err = run_cli(["score", "mcq", str(path), str(good)], capsys)
        assert_clean(code, err, names)
        code, err = run_cli(["score", "mcq", str(good), str(path)], capsys)
        assert_clean(code, err, names)


def test_a_deeply_nested_manifest_line(tmp_path, capsys):
    manifest = tmp_path / "nested.jsonl"
    manifest.write_text('{"verb": "video.probe", "args": {"video": "a.mp4"}}\n' + "[" * 100_000 + "\n")
    code, err = run_cli(["batch", str(manifest), "-o", str(tmp_path / "out"), "--no-progress"], capsys)
    assert_clean(code, err, "manifest line 2")
    assert not (tmp_path / "out" / "status.jsonl").exists()


def test_reason_caps_its_question_and_options(media, capsys):
    app = apps()["reason"]
    base = valid_args(app, good_media(app, media))
    code, err = run_cli(to_argv(app, {**base, "question": "x" * 100_000}), capsys)
    assert_clean(code, err, "question")
    code, err = run_cli(to_argv(app, {**base, "options": ["red", "y" * 2001]}), capsys)
    assert_clean(code, err, "options[1]")
    code, err = run_cli(to_argv(app, {**base, "options": ["red", "Red ", "blue"]}), capsys)
    assert_clean(code, err, "options")


def test_train_refuses_zero_or_negative_steps(tmp_path, capsys):
    for model in ("vit", "humor-sft", "gelvr-sft"):
        for steps in ("-1", "0"):
            out = tmp_path / f"{model}{steps}"
            code, err = run_cli(["train", model, f"--steps={steps}", "--out", str(out)], capsys)
            assert_clean(code, err, "--steps")
            assert not out.exists()
