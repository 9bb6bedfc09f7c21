"""What a new user saw from `atelier meme` on files (issue 58): writer markup on the picture, "a orange star", and
advice for the builtin world given on a real photo."""

import numpy as np
import pytest

from planners.meme_perception import fill_name_slots, has_markup
from worldgen.tasks.meme import with_articles


def test_slots_are_filled_with_the_article_the_name_needs():
    names = ["orange star", "blue ring"]
    assert fill_name_slots("me, a <o1>; A <o2>; an <o2>", names) == "me, an orange star; A blue ring; a blue ring"
    assert fill_name_slots("ignoring <o3>", names) == "ignoring <o3>"  # no third object: left for has_markup to refuse
    assert with_articles("me, a orange star") == "me, an orange star" and with_articles("a red star") == "a red star"


@pytest.mark.parametrize("text, markup", [("cyan diamond ignoring <oWrite", True), ("for <o3>", True), ("all about <topic>", True),
                                          ("I <3 mondays", False), ("x < o", False), ("cyan diamond", False)])
def test_writer_markup_is_recognised(text, markup):
    assert has_markup(text) is markup


class MarkupWriter:
    """Writes one caption with a dangling slot, then clean ones."""

    def __init__(self):
        self.calls = 0

    def write(self, image, topic=None, num_paths=0, n=1, **kw):
        self.calls += 1
        clean = [f"Text on the Meme:\nbox1: clean {self.calls}-{i}\nbox2: caption" for i in range(n)]
        return ["Text on the Meme:\nbox1: cyan diamond ignoring <o3>\nbox2: for <oWrite"] + clean[1:] if self.calls == 1 else clean


class FlatRM:
    def prefer(self, image, a, b, **kw):
        return 0.5


def test_a_caption_holding_writer_markup_never_reaches_the_picture():
    from pipelines.humor import HumorConfig, HumorPipeline

    pipe = HumorPipeline(HumorConfig(num_paths=0, num_memes=2), writer=MarkupWriter(), reward_model=FlatRM())
    pipe.set_progress_bar_config(disable=True)
    out = pipe(np.full((64, 64, 3), 90, np.uint8), generator=0)
    assert len(out.memes) == 2 and not any(has_markup(b) for m in out.summary()["memes"] for b in m["boxes"])
    assert any("slot markup" in r["why"] for r in out.rejected)


def test_nothing_from_a_picture_unlike_the_builtin_world_says_so_instead_of_another_seed(tmp_path, monkeypatch):
    from PIL import Image

    from app.runner import EmptyResultError, run_app
    from planners.meme_lm import BuiltinMemeWriter
    from pipelines.registry import get_app

    monkeypatch.setattr(BuiltinMemeWriter, "write", lambda self, image, topic=None, num_paths=0, n=1, **kw: ["no format"] * n)
    photo = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)  # a photo's many colours
    Image.fromarray(photo).save(tmp_path / "photo.png")
    with pytest.raises(EmptyResultError) as e:
        run_app(get_app("meme"), {"image": str(tmp_path / "photo.png"), "seed": 0, "progress": False})
    assert "another seed will not help" in str(e.value) and "try another seed" not in str(e.value)
    flat = np.full((64, 64, 3), 40, np.uint8)
    flat[20:40, 20:40] = (230, 30, 30)  # the builtin world: a seed may well help there
    Image.fromarray(flat).save(tmp_path / "flat.png")
    with pytest.raises(EmptyResultError, match="try another seed"):
        run_app(get_app("meme"), {"image": str(tmp_path / "flat.png"), "seed": 0, "progress": False})
