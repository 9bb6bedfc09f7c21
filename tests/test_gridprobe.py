"""GridProbe without weights: grid layout, importance map, budget rules (spec (d) 1-9) and the
oracle-VLM scenarios (spec (d) 11-14), frame fetching, compute accounting, outputs, baselines."""

import json
import logging
from itertools import product

import numpy as np
import pytest
import torch

from core.errors import InputError
from gridprobe_fakes import BatchingVLM, CountingSource, FakeVLM, ImageOnlyVLM, frame_ids, holistic_rule, id_frames, needle_rule
from pipelines import GridProbePipeline as ExportedPipeline
from pipelines.gridprobe import (GridLayout, GridProbeConfig, GridProbePipeline, budget_from_shape_strength, compare_methods,
                                 importance_map, select_budget, select_positions, shape_adaptive_budget, shape_stats)
from pipelines.gridprobe.baselines import random_positions, uniform_positions
from pipelines.gridprobe.selection import mean_threshold_budget, otsu_budget, participation_ratio_budget, rank_cells
from planners.protocol import peak_posterior, posterior_from_logits

OPTIONS = ["red", "green", "blue", "yellow"]


def make_pipe(rule=None, answerer=None, **config) -> GridProbePipeline:
    config.setdefault("grid", 4)
    pipe = GridProbePipeline(GridProbeConfig(**config), selector=FakeVLM(rule or needle_rule({5}, 2)), answerer=answerer)
    pipe.set_progress_bar_config(disable=True)
    return pipe


# ---- (d) 1-2: the grid -----------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3, 4, 7])
def test_rows_and_columns_partition_the_pool(K):
    g = GridLayout(K)
    everything = set(range(K * K))
    for axis in (g.row_indices(), g.col_indices()):
        flat = [p for probe in axis for p in probe]
        assert len(flat) == K * K and set(flat) == everything
    for r, c in product(range(K), repeat=2):
        assert set(g.row(r)) & set(g.col(c)) == {r * K + c} == {g.cell_to_position(r, c)}
        assert g.position_to_cell(r * K + c) == (r, c)
    for r in range(K):
        assert list(g.row(r)) == list(range(r * K, r * K + K))  # contiguous, ascending
    for c in range(K):
        assert list(g.col(c)) == [c + j * K for j in range(K)]  # stride K over [c, c + (K-1)K]
    assert [(p.axis, p.index) for p in g.probes()] == [("row", i) for i in range(K)] + [("col", i) for i in range(K)]


def test_pool_is_the_reference_rounded_linspace(caplog):
    assert GridLayout(3).pool_indices(100) == [int(x) for x in np.linspace(0, 99, 9).round()]
    assert GridLayout(3).pool_indices(100) == [0, 12, 25, 37, 50, 62, 74, 87, 99]  # numpy rounds halves to even
    with caplog.at_level(logging.WARNING):
        short = GridLayout(4).pool_indices(10)
    assert len(short) == 16 and short[0] == 0 and short[-1] == 9 and len(set(short)) == 10
    assert "fewer than the K²=16 pool" in caplog.text
    with pytest.raises(InputError, match="grid"):
        GridLayout(1)


# ---- (d) 3-8: map, budget, selection --------------------------------------------------------


def test_importance_map_is_rank_one_with_argmax_at_the_row_and_column_peaks():
    rng = np.random.default_rng(0)
    for K in (3, 6, 12):
        R, C = rng.uniform(0.25, 1, K), rng.uniform(0.25, 1, K)
        M = importance_map(R, C)
        assert M.shape == (K, K) and np.linalg.matrix_rank(M) == 1
        assert np.unravel_index(M.argmax(), M.shape) == (R.argmax(), C.argmax())


@pytest.mark.parametrize("tie_break", ["stable", "spread"])
def test_top_m_cells_form_a_down_set_under_dominance(tie_break):
    rng = np.random.default_rng(1)
    K = 5
    R, C = rng.choice([0.3, 0.5, 0.7, 0.9], K), rng.choice([0.3, 0.5, 0.7, 0.9], K)  # with ties
    M = importance_map(R, C)
    for m in range(1, K * K + 1):
        chosen = {divmod(p, K) for p in select_positions(M, m, tie_break)}
        assert len(chosen) == m
        for (r, c), (r2, c2) in product(chosen, product(range(K), repeat=2)):
            if R[r2] > R[r] and C[c2] > C[c]:
                assert (r2, c2) in chosen


def test_budget_is_invariant_to_scaling_and_permutation():
    rng = np.random.default_rng(2)
    for _ in range(20):
        K = 8
        R, C = rng.uniform(0.2, 1, K) ** 3, rng.uniform(0.2, 1, K) ** 3
        m = shape_adaptive_budget(importance_map(R, C))
        assert shape_adaptive_budget(importance_map(0.5 * R, 3.0 * C)) == m
        assert shape_adaptive_budget(importance_map(R[rng.permutation(K)], C[rng.permutation(K)])) == m


def test_budget_bounds_flat_maps_and_monotonicity():
    K = 12
    assert shape_adaptive_budget(np.full((K, K), 0.4)) == K * K
    assert shape_adaptive_budget(np.full((K, K), 0.4), max_frames=50) == 50
    rng = np.random.default_rng(3)
    for _ in range(50):
        M = importance_map(rng.uniform(0.1, 1, K) ** 4, rng.uniform(0.1, 1, K) ** 4)
        assert 2 <= shape_adaptive_budget(M) <= K * K
        assert 5 <= shape_adaptive_budget(M, min_frames=5, max_frames=20) <= 20
    budgets = [budget_from_shape_strength(s, K) for s in np.linspace(0, 30, 301)]
    assert budgets[0] == K * K and all(a >= b for a, b in zip(budgets, budgets[1:]))


def test_golden_budgets_of_the_paper_figure():
    assert [budget_from_shape_strength(s, 12) for s in (0.01, 6.6, 9.6)] == [140, 7, 5]
    assert [budget_from_shape_strength(s, 12, gamma=4.0) for s in (6.6, 9.6)] == [6, 4]  # why γ = 3, not 4
    # a map whose shape strength is exactly S gives the same budget through the full rule
    x = np.full(144, 0.5)
    x[0] = 0.9
    S = shape_stats(x).strength
    assert shape_adaptive_budget(x.reshape(12, 12)) == budget_from_shape_strength(S, 12)


def test_worked_example_maps():
    R, C = np.full(12, 0.3), np.full(12, 0.3)
    R[3], C[7] = 0.95, 0.9
    M = importance_map(R, C)
    s = shape_stats(M)
    assert s.skew == pytest.approx(4.29, abs=0.01) and s.kurtosis_excess == pytest.approx(27.1, abs=0.05)
    assert shape_adaptive_budget(M) == 3
    chosen = select_positions(M, 3)
    assert 3 * 12 + 7 in chosen and set(chosen) <= set(range(36, 48))  # the max, then ties inside row 3
    assert list(rank_cells(M)[:3]) == [43, 47, 46]  # stable reversed: (3,7), (3,11), (3,10)

    R = np.full(12, 0.9)
    R[3] = 0.2
    M = importance_map(R, np.full(12, 0.9))
    s = shape_stats(M)
    assert s.skew == pytest.approx(-3.02, abs=0.01)
    assert shape_adaptive_budget(M) == 7  # negative skew: redundancy, few frames suffice
    assert select_positions(M, 7) == list(range(137, 144))  # the reference's tie order: the last frames
    spread = select_positions(M, 7, "spread")
    assert len(spread) == 7 and spread[0] < 20 and spread[-1] > 120 and not set(spread) & set(range(36, 48))


def test_selected_positions_are_strictly_increasing_and_full_ties_take_the_last_frames():
    rng = np.random.default_rng(4)
    for _ in range(20):
        M = importance_map(rng.uniform(0.2, 1, 6), rng.uniform(0.2, 1, 6))
        for m in (1, 5, 36):
            sel = select_positions(M, m)
            assert all(a < b for a, b in zip(sel, sel[1:]))
    assert select_positions(np.ones((4, 4)), 3) == [13, 14, 15]
    assert select_positions(np.ones((4, 4)), 4, "spread") == [2, 6, 10, 14]
    with pytest.raises(InputError, match="tie_break"):
        select_positions(np.ones((4, 4)), 3, "random")
    with pytest.raises(InputError, match="m="):
        select_positions(np.ones((4, 4)), 17)


def test_confidence_lies_between_uniform_and_one():
    rng = np.random.default_rng(5)
    ids = [[0], [1, 2], [3], [4]]
    for n_opt in (2, 4):
        for _ in range(20):
            logp = posterior_from_logits(torch.tensor(rng.normal(0, 5, 8)), ids[:n_opt])
            assert 1 / n_opt - 1e-12 <= peak_posterior(logp) <= 1.0
    out = make_pipe(needle_rule({5}, 1))(id_frames(16), "q?", OPTIONS)
    assert np.all(out.row_conf >= 0.25 - 1e-12) and np.all(out.col_conf <= 1.0)


def test_alternative_selectors_follow_the_reference():
    x = np.array([0.1] * 12 + [0.9] * 4).reshape(4, 4)  # bimodal: 4 high cells
    assert mean_threshold_budget(x) == 4
    assert otsu_budget(x) == 4
    assert participation_ratio_budget(x) == 4  # the 4 peaks share all sharpened mass
    assert participation_ratio_budget(np.ones((4, 4))) == 2  # reference quirk: flat -> min_frames
    assert otsu_budget(np.ones((4, 4))) == 16
    for name in ("skew", "pr", "mean", "otsu"):
        assert 2 <= select_budget(name, x) <= 16
    with pytest.raises(InputError, match="budget_rule"):
        select_budget("entropy", x)
    with pytest.raises(InputError, match="gamma"):
        shape_adaptive_budget(x, gamma=-1)
    with pytest.raises(InputError, match="min_frames"):
        shape_adaptive_budget(x, min_frames=17)
    with pytest.raises(InputError, match="max_frames"):
        shape_adaptive_budget(x, min_frames=4, max_frames=3)


# ---- (d) 11-14: oracle VLM scenarios -------------------------------------------------------


def test_single_needle_is_found_with_a_small_budget():
    K, needle = 6, 2 * 6 + 4  # cell (2, 4)
    pipe = make_pipe(needle_rule({needle}, 3), grid=K)
    out = pipe(id_frames(K * K), "Which colour?", OPTIONS)
    assert out.row_conf.argmax() == 2 and out.col_conf.argmax() == 4
    assert np.unravel_index(out.importance_map.argmax(), (K, K)) == (2, 4)
    assert out.m_eff <= 6 and needle in out.frames
    assert out.answer == "D" and out.answer_index == 3 and out.answer_text == "yellow"
    assert out.posterior.sum() == pytest.approx(1.0) and out.posterior[3] == pytest.approx(0.95)
    assert out.ensemble_answer == "D"
    assert out.row_pred[2] == "D" and out.col_pred[4] == "D"


def test_two_needles_make_ghosts_and_stay_in_the_top_four():
    K = 6
    a, b = 1 * K + 1, 4 * K + 3  # cells (1, 1) and (4, 3)
    pipe = make_pipe(needle_rule({a, b}, 0), grid=K)
    out = pipe(id_frames(K * K), "q?", OPTIONS)
    top4 = set(int(p) for p in rank_cells(out.importance_map)[:4])
    assert {a, b} <= top4
    ghosts = {1 * K + 3, 4 * K + 1}  # (r1, c2) and (r2, c1) score exactly like the true needles
    assert top4 == {a, b} | ghosts
    assert len({out.importance_map.flat[p] for p in top4}) == 1
    assert {a, b} <= set(out.frames)


def test_holistic_question_gives_a_flat_map_and_keeps_every_frame():
    K = 5
    out = make_pipe(holistic_rule(1), grid=K)(id_frames(3 * K * K), "q?", OPTIONS)
    assert out.shape["std"] < 1e-10 and out.m_eff == K * K and out.frames == out.pool
    assert out.answer == "B"


def test_selector_and_answerer_see_the_expected_frame_counts():
    K = 4
    selector, answerer = FakeVLM(needle_rule({6}, 2)), FakeVLM(needle_rule({6}, 2))
    pipe = GridProbePipeline(GridProbeConfig(grid=K), selector=selector, answerer=answerer)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(id_frames(K * K), "q?", OPTIONS)
    assert [c["n_frames"] for c in selector.calls] == [K] * (2 * K)
    assert [c["ids"] for c in selector.calls[:K]] == [list(range(r * K, r * K + K)) for r in range(K)]
    assert [c["ids"] for c in selector.calls[K:]] == [list(range(c, K * K, K)) for c in range(K)]
    assert [c["n_frames"] for c in answerer.calls] == [out.m_eff]
    assert answerer.calls[0]["ids"] == out.frames == sorted(out.frames)
    # every pass says when its frames were taken: a row is a short stretch, a column spans the video
    span = lambda c: float(np.ptp(c["times"]))  # noqa: E731
    assert all(span(c) < 0.3 for c in selector.calls[:K]) and all(span(c) > 0.7 for c in selector.calls[K:])
    assert np.allclose(answerer.calls[0]["times"], np.asarray(out.frames) / out.pool[-1])  # source frame / last frame
    # the same model in both roles is stored once
    same = FakeVLM(holistic_rule(0))
    assert GridProbePipeline(selector=same, answerer=same).answerer is None


@pytest.mark.parametrize("probe_batch, batches", [(None, [5, 5]), (2, [2, 2, 1, 2, 2, 1]), (1, [])])
def test_probes_go_a_row_or_a_column_per_forward_with_the_same_posteriors(probe_batch, batches):
    K = 5
    lone = make_pipe(needle_rule({7, 18}, 1), grid=K)
    selector = BatchingVLM(needle_rule({7, 18}, 1))
    pipe = GridProbePipeline(GridProbeConfig(grid=K, probe_batch=probe_batch), selector=selector)
    pipe.set_progress_bar_config(disable=True)
    steps = []
    out = pipe(id_frames(K * K), "q?", OPTIONS, callback_on_step_end=lambda p, step, info: steps.append((step, info["axis"], info["index"])))
    ref = lone(id_frames(K * K), "q?", OPTIONS)
    assert selector.batches == batches  # never a batch across the rows/columns boundary; 1: one call per probe
    assert [c["ids"] for c in selector.calls] == [c["ids"] for c in lone.selector.calls]
    np.testing.assert_allclose(out.row_conf, ref.row_conf)
    np.testing.assert_allclose(out.col_conf, ref.col_conf)
    assert out.row_pred == ref.row_pred and out.col_pred == ref.col_pred and out.frames == ref.frames and out.tflops == ref.tflops
    assert steps == [(i, "row" if i < K else "col", i % K) for i in range(2 * K)]  # one callback per probe, in order
    with pytest.raises(InputError, match="probe_batch"):
        GridProbeConfig(probe_batch=0)


# ---- frames, resolutions, compute ------------------------------------------------------------


def test_only_the_pool_frames_are_fetched_in_one_call():
    source = CountingSource(1000)
    out = make_pipe(needle_rule({333}, 0), grid=4)(source, "q?", OPTIONS)
    assert source.requests == [GridLayout(4).pool_indices(1000)]
    assert out.pool == source.requests[0] and set(out.frames) <= set(out.pool)


def test_probe_resolution_is_separate_from_the_focus_resolution():
    pipe = make_pipe(needle_rule({5}, 2), grid=4, probe_scale=0.5, probe_height_scale=None)
    out = pipe(id_frames(16, (16, 24)), "q?", OPTIONS)
    calls = pipe.selector.calls
    assert {c["size"] for c in calls[:8]} == {(8, 12)} and calls[8]["size"] == (16, 24)  # one model in both roles
    assert 5 in frame_ids(out.frame_images)
    pipe = make_pipe(needle_rule({5}, 2), grid=4, probe_size=(4, 4), focus_scale=0.25)  # a size overrides both scales
    pipe(id_frames(16, (16, 24)), "q?", OPTIONS)
    assert {c["size"] for c in pipe.selector.calls[:8]} == {(4, 4)} and pipe.selector.calls[8]["size"] == (4, 6)


def test_squashed_probes_scale_height_and_width_apart():
    """probe_height_scale squashes the probe frames (fewer tokens a probe); the focused pass keeps its own size."""
    from pipelines.gridprobe.frames import check_scale, scale_text

    pipe = make_pipe(needle_rule({5}, 2), grid=4, probe_scale=0.5, probe_height_scale=0.25)
    out = pipe(id_frames(16, (16, 24)), "q?", OPTIONS)
    calls = pipe.selector.calls
    assert {c["size"] for c in calls[:8]} == {(4, 12)} and calls[8]["size"] == (16, 24)
    prompt = pipe.prompt("q?", OPTIONS)
    assert out.tflops["probe"] == pytest.approx(8 * pipe.selector.flops(4, prompt, (4, 12)) / 1e12)
    assert check_scale("s", (0.25, 0.5)) == (0.25, 0.5) and check_scale("s", [0.5, 0.5]) == 0.5
    assert scale_text((0.25, 0.5)) == "0.25x0.5" and scale_text(0.5) == "0.5"
    for bad in ((0.0, 0.5), (0.5, 2.0), (0.5,)):
        with pytest.raises(InputError, match="probe_scale"):
            check_scale("probe_scale", bad)
    with pytest.raises(InputError, match="probe_height_scale"):
        GridProbeConfig(probe_height_scale=1.5)


def test_compute_accounting_uses_the_model_flops_per_pass():
    pipe = make_pipe(needle_rule({5}, 2), grid=4, probe_scale=0.5, probe_height_scale=None)
    out = pipe(id_frames(16, (16, 24)), "q?", OPTIONS)
    prompt, fake = pipe.prompt("q?", OPTIONS), pipe.selector
    probe = 8 * fake.flops(4, prompt, (8, 12))
    focus = fake.flops(out.m_eff, prompt, (16, 24))
    full = fake.flops(16, prompt, (16, 24))
    assert out.tflops["probe"] == pytest.approx(probe / 1e12)
    assert out.tflops["focus"] == pytest.approx(focus / 1e12)
    assert out.tflops["total"] == pytest.approx((probe + focus) / 1e12)
    assert out.tflops["full_frame"] == pytest.approx(full / 1e12)
    assert out.tflops["reduction"] == pytest.approx(full / (probe + focus))
    assert set(out.seconds) == {"load", "probe", "focus", "total"} and out.seconds["total"] >= out.seconds["probe"]


def test_inputs_are_checked_with_the_argument_named():
    pipe = make_pipe()
    video = id_frames(16)
    for kwargs, name in [
        ({"question": "", "options": OPTIONS}, "question"),
        ({"question": "q?", "options": ["only"]}, "options"),
        ({"question": "q?", "options": [str(i) for i in range(11)]}, "options"),
        ({"question": "q?", "options": "ab"}, "options"),
        ({"question": "q?", "options": ["a", ""]}, "options"),
    ]:
        with pytest.raises(InputError, match=name):
            pipe(video, **kwargs)
    with pytest.raises(InputError, match="video"):
        pipe(video.astype(np.float32), "q?", OPTIONS)
    with pytest.raises(InputError, match="video"):
        pipe(object(), "q?", OPTIONS)
    for field, value in [("grid", 1), ("budget_rule", "nope"), ("gamma", -1.0), ("min_frames", 0), ("max_frames", 1),
                         ("tie_break", "x"), ("probe_scale", 0.0), ("focus_scale", 1.5), ("probe_size", (0, 4)),
                         ("prompt_style", "chatty")]:
        with pytest.raises(InputError, match=field):
            GridProbeConfig(**{field: value})
    with pytest.raises(InputError, match="min_frames"):
        GridProbeConfig(grid=2, min_frames=5)


def test_a_short_video_is_sampled_with_repeats_and_a_warning_as_the_reference_when_asked(caplog):
    with caplog.at_level(logging.WARNING):
        out = make_pipe(holistic_rule(0), grid=4, short_clips="repeat")(id_frames(6), "q?", OPTIONS)
    assert "fewer than the K²=16" in caplog.text and len(out.pool) == 16 and set(out.pool) == set(range(6))


@pytest.mark.parametrize("n, K", [(100, 10), (143, 11), (144, 12), (500, 12)])
def test_a_clip_shorter_than_the_pool_gets_the_largest_grid_without_repeats(n, K):
    pipe = make_pipe(needle_rule({n // 2}, 2), grid=12, probe_height_scale=None)
    out = pipe(id_frames(n, (32, 48)), "q?", OPTIONS)
    assert len(out.pool) == K * K == len(set(out.pool)) and len(out.row_conf) == K and out.note is None
    assert out.tflops["total"] <= out.tflops["full_frame"]


def test_a_100_frame_clip_never_costs_more_than_the_full_frame_pass():
    """The issue's case: 100 frames under the default K = 12 cost 1.23x the full-frame pass with a repeating pool."""
    from pipelines.gridprobe.config import GridProbeConfig as Defaults

    pipe = GridProbePipeline(Defaults(), selector=FakeVLM(needle_rule({50}, 2)))
    pipe.set_progress_bar_config(disable=True)
    out = pipe(id_frames(100, (64, 64)), "q?", OPTIONS)
    assert out.tflops["total"] <= out.tflops["full_frame"] and len(set(out.pool)) == len(out.pool) == 100


def test_a_clip_too_short_to_probe_cheaply_is_answered_full_frame_and_says_so():
    pipe = make_pipe(needle_rule({3}, 2), grid=12)
    out = pipe(id_frames(9, (32, 48)), "q?", OPTIONS)  # K = 3: six probes and up to 9 focused frames cost more than 9 frames
    assert out.note and "full-frame" in out.note and "note:" in str(out)
    assert out.frames == list(range(9)) and out.tflops["probe"] == 0 and out.tflops["total"] == pytest.approx(out.tflops["full_frame"])
    assert out.answer == "C" and len(pipe.selector.calls) == 1  # one pass, on every frame


def test_progress_bar_config_is_honoured(capsys):
    pipe = make_pipe()
    pipe(id_frames(16), "q?", OPTIONS)
    assert "GridProbe probes" not in capsys.readouterr().err
    pipe.set_progress_bar_config(disable=False, mininterval=0)
    pipe(id_frames(16), "q?", OPTIONS)
    assert "GridProbe probes" in capsys.readouterr().err


def test_output_saves_json_and_pictures(tmp_path):
    from PIL import Image

    out = make_pipe(needle_rule({5}, 2), grid=4)(id_frames(16), "Which colour?", OPTIONS)
    assert out.frame_images.dtype == np.uint8 and len(out.frame_images) == out.m_eff
    out.save(tmp_path)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["answer"] == "C" and result["frames"] == out.frames and len(result["importance_map"]) == 4
    assert json.loads((tmp_path / "config.json").read_text())["grid"] == 4
    heat = np.asarray(Image.open(tmp_path / "importance_map.png"))
    assert heat.ndim == 3 and heat.shape[1] >= 4 * 12
    assert Image.open(tmp_path / "selected_frames.png").size[0] >= 12
    lean = make_pipe(needle_rule({5}, 2), grid=4)(id_frames(16), "q?", OPTIONS, output_frames=False)
    assert lean.frame_images is None and lean.save(tmp_path / "lean").joinpath("result.json").is_file()
    assert not (tmp_path / "lean" / "selected_frames.png").exists()


def test_pipelines_package_exports_the_pipeline():
    assert ExportedPipeline is GridProbePipeline


def test_config_survives_a_json_round_trip():
    import dataclasses

    config = GridProbeConfig(grid=6, probe_size=(32, 48), focus_size=(64, 96), max_frames=20, budget_rule="otsu")
    again = GridProbeConfig(**json.loads(json.dumps(dataclasses.asdict(config))))
    assert again == config and again.probe_size == (32, 48)


# ---- baselines ---------------------------------------------------------------------------------


def test_compare_methods_shares_probes_and_reports_every_method():
    K, needle = 4, 9
    fake = FakeVLM(needle_rule({needle}, 1), text_target=[needle])
    pipe = GridProbePipeline(GridProbeConfig(grid=K), selector=fake)
    pipe.set_progress_bar_config(disable=True)
    source = CountingSource(K * K)
    cmp = compare_methods(pipe, source, "q?", OPTIONS, probe_scales=[1.0, 0.5], fixed_budget=3, generator=0)
    assert len(source.requests) == 1
    labels = [r.label for r in cmp.results]
    for method in ("gridprobe", "probe_ensemble", "uniform_meff", "random_meff", "encoder_meff"):
        assert f"{method}@1" in labels and f"{method}@0.5" in labels
    assert labels.count("full_frame") == 1 and labels.count("uniform_m") == 1
    assert len([c for c in fake.calls if c["size"] == (4, 6)]) == 2 * K  # one probe run per scale
    full = cmp.get("full_frame")
    assert full.frames == list(range(K * K)) and full.m_eff == K * K
    assert cmp.get("uniform_m").frames == uniform_positions(K * K, 3) == [0, 8, 15]
    gp = cmp.get("gridprobe", 1.0)
    assert gp.answer == "B" and needle in gp.frames and gp.tflops > cmp.get("probe_ensemble", 1.0).tflops
    assert needle in cmp.get("encoder_meff", 1.0).frames
    assert len(cmp.get("random_meff", 1.0).frames) == gp.m_eff
    # identical frame sets share a forward: 2K probes per scale plus one pass per distinct frame set
    distinct = {tuple(r.frames) for r in cmp.results if r.method != "probe_ensemble"}
    assert len(fake.calls) == 2 * 2 * K + len(distinct)
    assert cmp.outputs[1.0].m_eff == gp.m_eff
    # a pool fetched once can be reused for more questions on the same video, but only under the same grid
    pool = pipe.load_pool(source)
    assert compare_methods(pipe, pool, "again?", OPTIONS, methods=["full_frame"]).get("full_frame").answer == "B"
    pipe.config.grid = 2
    with pytest.raises(InputError, match="pool"):
        compare_methods(pipe, pool, "q?", OPTIONS)


def test_budget_variants_reuse_the_probes_and_each_keeps_its_own_budget():
    K = 4
    fake = FakeVLM(holistic_rule(1))  # a flat map: the default budget keeps every frame
    pipe = GridProbePipeline(GridProbeConfig(grid=K), selector=fake)
    pipe.set_progress_bar_config(disable=True)
    budgets = [{"max_frames": 5}, {"max_frames": 5, "tie_break": "spread"}]
    cmp = compare_methods(pipe, CountingSource(K * K), "q?", OPTIONS, methods=["gridprobe"], budgets=budgets)
    # the pipeline's own probes (default: 1/4 height x 1/2 width), under each budget
    assert [r.label for r in cmp.results] == ["gridprobe@0.25x0.5", "gridprobe@0.25x0.5/max_frames=5", "gridprobe@0.25x0.5/max_frames=5,tie_break=spread"]
    assert [r.m_eff for r in cmp.results] == [K * K, 5, 5]
    assert cmp.results[1].frames == list(range(11, 16)) and cmp.results[2].frames != cmp.results[1].frames  # ties: last frames, or spread
    assert len([c for c in fake.calls if c["n_frames"] == K]) == 2 * K  # the probes ran once for all three
    assert cmp.results[1].tflops < cmp.results[0].tflops and pipe.config.max_frames == 32  # the pipeline's own settings are back
    for bad in ({}, {"grid": 3}, {"gamma": -1.0}):
        with pytest.raises(InputError):
            compare_methods(pipe, CountingSource(K * K), "q?", OPTIONS, methods=["gridprobe"], budgets=[bad])


def test_baseline_frame_choices():
    assert uniform_positions(16, 16) == list(range(16))
    a = random_positions(144, 7, np.random.default_rng(3))
    assert a == random_positions(144, 7, np.random.default_rng(3)) and len(set(a)) == 7 and a == sorted(a)
    with pytest.raises(InputError, match="budget"):
        uniform_positions(16, 0)


def test_encoder_baseline_needs_encode_text():
    pipe = GridProbePipeline(GridProbeConfig(grid=2), selector=ImageOnlyVLM(holistic_rule(0)))
    pipe.set_progress_bar_config(disable=True)
    cmp = compare_methods(pipe, id_frames(4), "q?", OPTIONS)  # default: skipped with a warning
    assert "encoder_meff" not in {r.method for r in cmp.results}
    with pytest.raises(InputError, match="encode_text"):
        compare_methods(pipe, id_frames(4), "q?", OPTIONS, methods=["encoder_meff"])
    with pytest.raises(InputError, match="methods"):
        compare_methods(pipe, id_frames(4), "q?", OPTIONS, methods=["oracle"])
