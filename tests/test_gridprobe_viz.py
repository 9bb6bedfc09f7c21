"""GridProbe's pictures: the importance map (axes, colour bar), the labelled frame strip, the posterior chart."""

import numpy as np
import pytest

from core.errors import InputError
from pipelines.gridprobe.viz import _viridis, frame_labels, frame_strip, heatmap_image, posterior_chart

# a map whose brightest cell (row 1, column 2) and darkest (row 3, column 0) are single cells
MAP = np.outer([0.3, 0.9, 0.5, 0.2], [0.4, 0.8, 1.0, 0.6])


def _bar_columns(img: np.ndarray, side: int) -> list[int]:
    """Columns holding a vertical run of ``side`` saturated pixels whose brightness never rises going
    down: the colour bar (viridis runs dark purple -> yellow, darker as the values fall)."""
    found = []
    for x in range(img.shape[1]):
        col = img[:, x].astype(int)
        saturated = np.flatnonzero(col.max(1) - col.min(1) > 40)
        if len(saturated) < side:
            continue
        run = col[saturated[0] : saturated[0] + side]
        brightness = run.sum(1)
        if np.ptp(brightness) > 200 and np.all(np.diff(brightness) <= 3):
            found.append(x)
    return found


def test_heatmap_has_a_colour_bar_from_the_maximum_down_to_the_minimum():
    img = heatmap_image(MAP, [6], cell_px=20)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert img.shape[0] > 4 * 20 and img.shape[1] > 4 * 20 + 40  # axes and the bar around the cells
    bar = _bar_columns(img, 4 * 20)
    assert len(bar) >= 8, "no monotone colour bar found"
    col = img[:, bar[len(bar) // 2]]
    rows = np.flatnonzero(np.ptp(col.astype(int), axis=1) > 40)
    top, bottom = col[rows[0] + 1], col[rows[-1] - 1]
    np.testing.assert_allclose(top, _viridis(np.array([[255]]))[0, 0], atol=8)  # the map's maximum
    np.testing.assert_allclose(bottom, _viridis(np.array([[0]]))[0, 0], atol=8)  # its minimum
    # the cells keep their colours: the brightest cell is the top of the bar's colour
    assert (img == _viridis(np.array([[255]]))[0, 0]).all(-1).sum() >= 20 * 20 // 2


def test_heatmap_draws_axes_outlines_and_is_deterministic():
    a = heatmap_image(MAP, [6], cell_px=20, caption="4x4 map, M_eff=1")
    assert a.tobytes() == heatmap_image(MAP, [6], cell_px=20, caption="4x4 map, M_eff=1").tobytes()
    assert a.tobytes() != heatmap_image(MAP, [], cell_px=20, caption="4x4 map, M_eff=1").tobytes()
    plain = heatmap_image(MAP, [6], cell_px=20)
    assert a.shape[0] > plain.shape[0]  # the caption is a title above
    # text (tick labels, "row", "column") in the margins left of and above the cells
    dark = (plain.astype(int).sum(-1) < 400)
    left_margin = dark[:, :20].any()
    top_margin = dark[:20].any()
    assert left_margin and top_margin
    # many cells (K = 40): labels thin out, no error; a flat map still gets a bar
    big = heatmap_image(np.full((40, 40), 0.25), [0, 1599])
    assert big.ndim == 3 and big.shape[1] > 40 * 12
    with pytest.raises(InputError, match="importance"):
        heatmap_image(np.ones((3, 4)))


def test_frame_labels_give_index_and_time():
    assert frame_labels([412, 5], [13.71, 0.2]) == ["#412  13.7 s", "#5  0.2 s"]
    assert frame_labels([412, 5]) == ["#412", "#5"]
    with pytest.raises(InputError, match="times"):
        frame_labels([1, 2], [0.5])


def test_frame_strip_shape_labels_and_bytes():
    frames = np.stack([np.full((48, 96, 3), 40 * i, np.uint8) for i in range(3)])
    labels = frame_labels([12, 150, 412], [0.5, 6.0, 13.7])
    strip = frame_strip(frames, labels)
    assert strip.dtype == np.uint8 and strip.shape[1] > 3 * 96 and strip.shape[0] > 48  # frames plus label bands
    assert strip.tobytes() == frame_strip(frames, labels).tobytes()
    assert strip.tobytes() != frame_strip(frames, frame_labels([12, 150, 412])).tobytes()
    assert frame_strip(frames).shape[0] < strip.shape[0]  # no labels: no bands
    two_rows = frame_strip(np.concatenate([frames] * 3), labels * 3, columns=4)
    assert two_rows.shape[0] > 2 * 48 and two_rows.shape[1] < 5 * 96
    tiny = frame_strip(np.zeros((2, 8, 12, 3), np.uint8), frame_labels([3, 9], [1.25, 3.75]))
    assert tiny.shape[1] >= 2 * 64  # blown up so a label fits
    with pytest.raises(InputError, match="labels"):
        frame_strip(frames, ["#1"])


def test_posterior_chart_highlights_the_answer_and_takes_any_text():
    options = ["a red star", "猫が走る", "Ünïcödé émoji 🐈 and an option far too long to fit beside its bar", "nothing"]
    img = posterior_chart(options, [0.1, 0.6, 0.25, 0.05], answer_index=1)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[1] == 560
    assert img.tobytes() == posterior_chart(options, [0.1, 0.6, 0.25, 0.05], answer_index=1).tobytes()
    orange = (img == (214, 96, 20)).all(-1)
    blue = (img == (126, 156, 196)).all(-1)
    assert orange.any() and blue.any()
    rows = np.flatnonzero(orange.any(1))
    assert np.ptp(rows) < 30  # one bar is the answer's
    # bar lengths follow the probabilities: the answer's (0.6) is longer than the 0.25 one
    assert orange.sum(1).max() > 2 * blue.sum(1).max()
    assert not (posterior_chart(["x", "y"], np.array([0.5, 0.5])) == (214, 96, 20)).all(-1).any()  # no answer: none highlighted
    with pytest.raises(InputError, match="posterior"):
        posterior_chart(["x", "y"], [1.0])
    with pytest.raises(InputError, match="answer_index"):
        posterior_chart(["x", "y"], [0.5, 0.5], answer_index=2)


def test_output_pictures_use_frame_times_when_there():
    from gridprobe_fakes import FakeVLM, id_frames, needle_rule
    from pipelines.gridprobe import GridProbeConfig, GridProbePipeline

    pipe = GridProbePipeline(GridProbeConfig(grid=4), selector=FakeVLM(needle_rule({5}, 2)))
    pipe.set_progress_bar_config(disable=True)
    out = pipe(id_frames(16), "Which colour?", ["red", "green", "blue", "yellow"])
    chart = out.posterior_image()
    assert chart.dtype == np.uint8 and (chart == (214, 96, 20)).all(-1).any()
    out.frame_times = None
    untimed = out.strip()
    out.frame_times = [i / 8.0 for i in out.frames]
    timed = out.strip()
    assert timed.shape[0] >= untimed.shape[0] and timed.tobytes() != untimed.tobytes()
