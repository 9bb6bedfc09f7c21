"""The builtin Bernini layout planner: its token grammar, the layouts training reads from worldgen, and the
planner's plan() as the pipeline calls it (tiny random weights)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.errors import InputError
from planners.semantic.layout_planner import TASK_IDS, LayoutPlanner, LayoutPlannerConfig
from planners.semantic.layout_tokens import BOS, EOS, LayoutObject, SceneLayout
from planners.semantic.planner import PlanRequest
from planners.semantic.layout import VisualTokens
from training.bernini_data import DataConfig, world_sample
from training.bernini_layout import item_layout, layout_vocab


@pytest.fixture(scope="module")
def vocab():
    return layout_vocab()


def test_a_layout_round_trips_through_its_tokens(vocab):
    lay = SceneLayout("checker", "dark green", [LayoutObject("red", "star", "large", "linear", [17, 18, None, 20]),
                                                 LayoutObject("blue", "person", "small", "static", [200, 200, 200, 200])])
    ids = vocab.encode(lay)
    assert ids[0] == BOS and ids[-1] == EOS and len(ids) == 1 + 2 + 2 * vocab.object_length + 1
    assert vocab.decode(ids) == lay
    assert "red star" in lay.text() and "absent" in lay.text() and "(1, 1)" in lay.text()


def test_the_grammar_allows_one_field_per_position_and_ends_only_between_objects(vocab):
    a, b, eos = vocab.allowed(3)  # the first object's colour: no empty layout
    assert (a, b) == vocab.offsets["color"] and not eos
    a, b, eos = vocab.allowed(3 + vocab.object_length)  # the second object's colour, or the end
    assert (a, b) == vocab.offsets["color"] and eos
    assert vocab.allowed(3 + vocab.max_objects * vocab.object_length)[:2] == (EOS, EOS + 1)
    with pytest.raises(InputError, match="color"):
        vocab.encode(SceneLayout("solid", "dark grey", [LayoutObject("mauve", "star", "large", "linear", [0, 0, 0, 0])]))


@pytest.mark.parametrize("task", ["t2v", "v2v", "r2v"])
def test_training_layouts_follow_what_the_text_names(task):
    cfg = DataConfig()
    for index in range(3):
        lay = item_layout(task, "val", 0, index, cfg)
        rec = world_sample(task, "val", 0, index, cfg).record
        if task == "t2v":  # the caption names the world's first objects, in order
            named = [(o["color"], o["shape"]) for o in rec["attributes"]["objects"]]
        elif task == "r2v":  # the references come first, in prompt order
            named = [(r["color"], r["shape"]) for r in rec["references"]]
        else:  # an edit's target world, in the source's order
            named = [(o["color"], o["shape"]) for o in rec["target_world"]["objects"]][:6]
        assert [(o.color, o.shape) for o in lay.objects[: len(named)]] == named


def _tiny():
    torch.manual_seed(0)
    return LayoutPlanner(LayoutPlannerConfig(layout_vocab=layout_vocab().to_dict(), width=32, depth=1, heads=2, painter_fine=16, painter_width=16,
                                             painter_depth=1)).eval()


def test_plan_writes_a_layout_then_paints_the_plan_grid(tmp_path):
    planner = _tiny()
    text = torch.randn(5, 384)
    source = VisualTokens(torch.randn(4, 8, 8, 192), "video")
    steps = []
    for task, sources in (("t2v", []), ("v2v", [source]), ("r2v", [VisualTokens(torch.randn(1, 8, 8, 192), "image")] * 2)):
        out = planner.plan(PlanRequest(prompt_embeds=text, task=task, sources=sources), grid=(4, 8, 8), generator=3,
                           callback=lambda s, info: steps.append(s))
        assert out.tokens.shape == (4, 8, 8, 192)
        assert out.cot_text.startswith("background: ") and out.layout.objects
    assert steps and steps[0] == 0
    # a saved planner reloads and, from the same seed, writes the same layout and plan
    planner.save_pretrained(tmp_path / "p")
    again = LayoutPlanner.from_pretrained(tmp_path / "p")
    a = planner.plan(PlanRequest(prompt_embeds=text), grid=(4, 8, 8), generator=5)
    b = again.plan(PlanRequest(prompt_embeds=text), grid=(4, 8, 8), generator=5)
    assert a.cot_text == b.cot_text and torch.equal(a.tokens, b.tokens)
    # a folder saved before the "read" task (one task and one kind row fewer) still loads and plans the same
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "p" / "model.safetensors")
    for name in ("writer.task.weight", "writer.kind.weight"):
        state[name] = state[name][:3].contiguous()
    save_file(state, tmp_path / "p" / "model.safetensors")
    older = LayoutPlanner.from_pretrained(tmp_path / "p")
    c = older.plan(PlanRequest(prompt_embeds=text), grid=(4, 8, 8), generator=5)
    assert c.cot_text == a.cot_text and torch.equal(c.tokens, a.tokens)


def test_plan_refuses_a_task_it_was_not_trained_for():
    with pytest.raises(InputError, match="task"):
        _tiny().plan(PlanRequest(prompt_embeds=torch.randn(3, 384), task="ads2v"), grid=(4, 8, 8))


def test_the_bernini_pipeline_runs_a_layout_planner_and_saves_it(tmp_path):
    from pipelines.bernini import BerniniPipeline
    from planners.semantic.encoder import BuiltinPlanEncoder
    from renderers.builtin import BuiltinRenderer, BuiltinRendererConfig

    torch.manual_seed(0)
    renderer = BuiltinRenderer(BuiltinRendererConfig(width=32, depth=1, heads=2, steps=2)).eval()
    pipe = BerniniPipeline(planner=_tiny(), renderer=renderer, encoder=BuiltinPlanEncoder.from_pretrained())
    pipe.set_progress_bar_config(disable=True)
    clip = (torch.rand(16, 64, 64, 3) * 255).to(torch.uint8).numpy()
    for kw in ({}, {"video": clip}, {"references": [clip[0], clip[1]]}):
        out = pipe("a red star moves to the left", generator=1, **kw)
        assert out.video.shape == (16, 64, 64, 3) and out.plan_tokens.shape == (4, 8, 8, 192)
        assert out.cot_text.startswith("background: ")
    pipe.save_pretrained(tmp_path / "pipe")
    again = BerniniPipeline.from_pretrained(tmp_path / "pipe")
    again.set_progress_bar_config(disable=True)
    assert type(again.planner).__name__ == "LayoutPlanner"
    a, b = pipe("a red star moves to the left", generator=2), again("a red star moves to the left", generator=2)
    assert a.cot_text == b.cot_text and np.array_equal(a.video, b.video)


def test_places_after_the_first_are_written_as_moves(vocab):
    left = vocab._moves([20, 19, 18, 17])  # one cell to the left on each plan frame
    assert len(set(left[1:])) == 1 and left[1] == vocab.move_id((-1, 0))
    assert vocab._cells(left) == [20, 19, 18, 17]
    # an object that appears late moves from the canvas centre; a jump beyond the move radius is clipped
    n, r = vocab.cells, vocab.move_radius
    centre = (n // 2) * n + n // 2
    assert vocab._cells(vocab._moves([None, centre + 2, None, centre + 3])) == [None, centre + 2, None, centre + 3]
    assert vocab._cells(vocab._moves([0, n - 1, n - 1, n - 1]))[1] == r


def test_the_training_script_runs_both_parts_then_the_writer_alone(tmp_path):
    from training.layout_planner import main

    assert main(["--tiny", "--out", str(tmp_path / "a")]) == 0
    first = LayoutPlanner.from_pretrained(tmp_path / "a")
    assert main(["--tiny", "--out", str(tmp_path / "b"), "--parts", "writer", "--init", str(tmp_path / "a")]) == 0
    second = LayoutPlanner.from_pretrained(tmp_path / "b")
    # the painter came over untouched; the writer trained on
    assert all(torch.equal(a, b) for a, b in zip(first.painter.state_dict().values(), second.painter.state_dict().values()))
    assert not all(torch.equal(a, b) for a, b in zip(first.writer.state_dict().values(), second.writer.state_dict().values()))
    assert (tmp_path / "b" / "card.md").read_text().count("writer alone") == 1


def test_an_edit_can_read_its_source_layout_first(tmp_path):
    from training.bernini_layout import source_layout

    # the source layout is the source world's, in the order the target keeps
    rec = world_sample("v2v", "val", 0, 1, DataConfig()).record
    src = source_layout("val", 0, 1)
    assert [(o.color, o.shape) for o in src.objects] == [(o["color"], o["shape"]) for o in rec["source_world"]["objects"]][:6]
    planner = _tiny()
    planner.config.read_source = True
    text, source = torch.randn(5, 384), torch.randn(4, 8, 8, 192)
    ids, read = planner.write("v2v", text, source, [], torch.Generator().manual_seed(0))
    assert read is not None and read[0] == 1 and planner.vocab.decode(read).objects  # a whole layout, read greedily
    assert planner.write("v2v", text, source, [], None, 0.0)[1] == read  # reading draws nothing from the generator
    assert planner.write("t2v", text, None, [])[1] is None
    # the read layout is part of the edit's prefix: it changes what the writer predicts
    w = planner.writer
    with_read, without = w.prefix("v2v", text, source, [], read), w.prefix("v2v", text, source, [])
    assert len(with_read) == len(without) + len(read)
    out = planner.plan(PlanRequest(prompt_embeds=text, task="v2v", sources=[VisualTokens(source, "video")]), grid=(4, 8, 8), generator=0)
    assert out.cot_text.startswith("source: background: ") and " | edit: background: " in out.cot_text


def test_the_training_script_teaches_reading_and_keeps_an_older_writers_tables(tmp_path):
    from core.weights_io import load_state_dict, save_state_dict
    from training.layout_planner import init_weights, main

    assert main(["--tiny", "--out", str(tmp_path / "a")]) == 0
    old = LayoutPlanner.from_pretrained(tmp_path / "a")
    # a writer saved before the "read" task and the source-layout prefix had one row fewer in each table
    state = load_state_dict(tmp_path / "a" / "model.safetensors")
    state = {k: (v[:-1] if k in ("writer.task.weight", "writer.kind.weight") else v) for k, v in state.items()}
    save_state_dict(state, tmp_path / "a" / "model.safetensors")
    fresh = _tiny()
    init_weights(fresh, tmp_path / "a")
    assert torch.equal(fresh.writer.task.weight[:3], old.writer.task.weight[:3]) and torch.equal(fresh.writer.kind.weight[:3], old.writer.kind.weight[:3])
    assert main(["--tiny", "--out", str(tmp_path / "b"), "--read-source", "--mix", "0.2,0.6,0.2", "--init", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "b" / "train_config.json").read_text())["mix"] == [0.2, 0.6, 0.2]
    new = LayoutPlanner.from_pretrained(tmp_path / "b")
    assert new.config.read_source and not old.config.read_source and new.writer.task.weight.shape[0] == len(TASK_IDS)


def test_task_planners_hand_each_task_to_its_planner_and_save_both(tmp_path):
    """The builtin planner slot: the layout planner for t2v / r2v (and t2i), the token planner for edits (and i2v,
    rv2v); a saved folder names each task's sub-folder and loads back to the same planners."""
    from planners.semantic.by_task import TaskPlanners
    from planners.semantic.loading import load_planner

    a, b = _tiny(), _tiny()
    planners = TaskPlanners({"t2v": a, "r2v": a, "v2v": b})
    assert planners.for_task("t2i") is a and planners.for_task("rv2v") is b and planners.for_task("i2v") is b
    with pytest.raises(InputError, match="task"):
        planners.for_task("ads2v")
    with pytest.raises(InputError, match="planners"):
        TaskPlanners({"t2x": a})
    text = torch.randn(5, 384)
    ref = VisualTokens(torch.randn(1, 8, 8, 192), "image")
    out = planners.plan(PlanRequest(prompt_embeds=text, task="r2v", sources=[ref]), grid=(4, 8, 8), generator=2)
    assert torch.equal(out.tokens, a.plan(PlanRequest(prompt_embeds=text, task="r2v", sources=[ref]), grid=(4, 8, 8), generator=2).tokens)
    planners.save_pretrained(tmp_path / "tp")
    saved = json.loads((tmp_path / "tp" / "config.json").read_text())
    assert saved["tasks"] == {"t2v": "planner_0", "r2v": "planner_0", "v2v": "planner_1"}
    again = load_planner(str(tmp_path / "tp"))
    assert again.for_task("t2v") is again.for_task("r2v") and again.for_task("v2v") is not again.for_task("t2v")
    again_out = again.plan(PlanRequest(prompt_embeds=text, task="r2v", sources=[ref]), grid=(4, 8, 8), generator=2)
    assert torch.equal(again_out.tokens, out.tokens)
    (tmp_path / "tp" / "config.json").write_text(json.dumps({"model": "task-planners", "tasks": {"t2v": "../elsewhere"}}))
    with pytest.raises(InputError, match="sub-folder"):
        load_planner(str(tmp_path / "tp"))


def test_the_builtin_planner_is_the_layout_planner_for_generation_and_the_token_planner_for_edits():
    from planners.semantic.layout_planner import LayoutPlanner
    from planners.semantic.loading import load_planner
    from planners.semantic.planner import SemanticPlanner

    planner = load_planner("builtin")
    assert isinstance(planner.for_task("t2v"), LayoutPlanner) and planner.for_task("r2v") is planner.for_task("t2v")
    assert isinstance(planner.for_task("v2v"), SemanticPlanner)
