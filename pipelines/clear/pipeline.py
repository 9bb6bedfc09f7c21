"""ClearPipeline: training-free video reasoning segmentation (specs/clear.md) [PROPOSED throughout].

check_inputs -> anchor -> proposals -> candidate tracks -> selection -> fast propagation with the
event monitor -> slow re-anchoring -> output:

1. **proposals** (the ``proposer`` component, e.g. the classic colour proposer or SAM 2 automatic
   masks) on ``anchor_samples`` uniformly spaced frames; the **anchor** is the one with the most;
2. **candidate tracks**: one multi-object tracker session prompted with the anchor's candidates,
   propagated forward and backward; then every sampled proposal no track covers (an object that
   appears late or leaves early) is tracked from its own frame; all renumbered 1..N;
3. (the planner sees each candidate over time);
4. **selection** by the ``planner`` (an instance selector: ``select(frames, marks, query) ->
   Selection``; the counterfactual VLM selector or the builtin instance reasoner) on
   ``selection_frames`` frames; "no object matches" gives empty masks;
5. **fast mode**: the chosen candidate's track, watched frame by frame by the event monitor
   (presence, area, drift, appearance against the concept dictionary's prototypes, jumps, cuts);
6. **slow mode** on an event the controller escalates: proposals on that frame, re-ranked by the
   dictionary (``score``: like the target's prototypes, unlike the distractors') and by overlap with
   the last confirmed mask; the best candidate re-prompts a fresh tracker session from that frame.

Candidate tracks are held for the whole clip, so a request is bounded by the memory of N x T
masks before any work (``core.memory``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from core.errors import InputError
from core.memory import check_allocation
from pipelines.base import Pipeline, PipelineOutput, component_backend, make_generator, output_field
from pipelines.clear.config import COMPONENT_SPECS, ClearConfig, InstanceSelector  # noqa: F401  (torch-free in config.py; importable here too)
from pipelines.clear.dictionary import ConceptDictionary
from planners.counterfactual import Mark, Selection
from trackers.monitor import EventMonitor, ModeController, MonitorEvent, centroid, mask_iou
from trackers.protocol import open_source
from trackers.proposals import Candidate

MAX_QUERY_CHARS = 2000


def _at_size(masks: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Id maps ``(T, h, w)`` at the input's ``(H, W)`` (nearest: ids are labels, never blended)."""
    from core.frames import resize_frames

    masks = masks.astype(np.uint8)
    return masks if masks.shape[1:] == tuple(size) else resize_frames(masks, size, "nearest")
_CLAUSE = re.compile(r"\b(that|which|who|whose|when|while|after|before|until|with|without|in|on|at|near|behind|from|into|to|than)\b", re.I)
_FILLER = {"the", "a", "an", "segment", "find", "track", "show", "me", "please", "first", "last"}


def concept_phrase(query: str) -> str:
    """The noun phrase a concept proposer (SAM 3) is prompted with: the query up to its first
    clause or preposition, without articles ("the red circle that disappears first" -> "red circle");
    "object" when nothing is left ("the one that never moves") [PROPOSED]."""
    head = _CLAUSE.split(query.strip(), maxsplit=1)[0]
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z-]*", head) if w.lower() not in _FILLER]
    phrase = " ".join(words)
    return phrase if phrase and phrase.lower() not in {"one", "thing", "something"} else "object"


def selection_indices(n: int, k: int) -> list[int]:
    """``k`` evenly spaced frames of ``n`` (all of them when ``k >= n``): what CLEAR's planner sees."""
    k = min(k, n)
    return [int(i) for i in ((np.arange(k) + 0.5) * n / k).astype(int)]


@dataclass(repr=False)
class ClearOutput(PipelineOutput):
    """One segmented query: ``masks`` uint8 id maps ``(T, H, W)`` (1 = the target, all 0 when no
    object matches), ``target_id`` (the candidate number at the anchor, None for no match), the
    anchor frame and its numbered candidates (``marks`` image), the planner's ``selection`` with its
    reasoning, ``events`` (frame, kind, signal value, threshold, action) and ``modes`` per frame."""

    query: str
    target_id: int | None
    no_match: bool
    ambiguous: bool
    anchor_frame: int
    track_frame: int  # where the target's track was prompted: the anchor, or the frame a late candidate was first seen on
    selection: dict
    events: list[dict]
    modes: list[str]
    planner_calls: int
    seconds: dict
    masks: np.ndarray = output_field("masks")
    marks: np.ndarray | None = output_field("image", default=None)
    overlay: np.ndarray | None = output_field("video", default=None)

    def timeline(self) -> np.ndarray:
        """The event timeline as an RGB image (mode per frame, events as ticks)."""
        from pipelines.clear.viz import timeline_image

        return timeline_image(self.modes, self.events, present=(self.masks.reshape(len(self.masks), -1) > 0).any(1))

    PICTURES = ('timeline',)

    def pictures(self) -> dict[str, np.ndarray | None]:
        return {"timeline": self.timeline()}

    def summary(self) -> dict[str, Any]:
        slow = sum(m == "slow" for m in self.modes)
        return {"query": self.query, "target_id": self.target_id, "no_match": self.no_match, "ambiguous": self.ambiguous,
                "anchor_frame": self.anchor_frame, "track_frame": self.track_frame, "frames": int(len(self.masks)),
                "target_frames": int((self.masks.reshape(len(self.masks), -1) > 0).any(1).sum()),
                "events": len(self.events), "slow_frames": int(slow), "planner_calls": self.planner_calls,
                "seconds": {k: round(float(v), 3) for k, v in self.seconds.items()}}

    def __str__(self) -> str:
        s = self.summary()
        if s["no_match"]:
            return f"no object matches: {s['query']!r}"
        flag = " (ambiguous)" if s["ambiguous"] else ""
        return (f"target: candidate #{s['target_id']}{flag} chosen on frame {s['anchor_frame']}; on screen in {s['target_frames']} "
                f"of {s['frames']} frames; {s['events']} events, {s['slow_frames']} slow re-anchorings, {s['planner_calls']} planner calls")


def appearance(frame: np.ndarray, mask: np.ndarray, bins: int = 4) -> np.ndarray | None:
    """A colour histogram (Lab, bins^3) of the masked pixels: the visual prototype [PROPOSED]."""
    if not mask.any():
        return None
    lab = cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2LAB)[mask].astype(np.int32)
    idx = ((lab[:, 0] * bins) >> 8) * bins * bins + ((lab[:, 1] * bins) >> 8) * bins + ((lab[:, 2] * bins) >> 8)
    h = np.bincount(idx, minlength=bins ** 3).astype(np.float32)
    return h / np.linalg.norm(h)


def _on_any(mask: np.ndarray, others: list[np.ndarray]) -> bool:
    """Whether ``mask`` coincides (IoU > 0.5) with any of ``others``."""
    return any(mask_iou(mask, o) > 0.5 for o in others)


def distinct_tracks(masks: np.ndarray, iou: float, share: float = 0.8, max_frames: int = 64) -> list[int]:
    """Indices of the tracks ``(N, T, H, W)`` to keep: a track that coincides (IoU > ``iou``) with
    an earlier one on at least ``share`` of the frames where either is present is a duplicate (two
    candidates whose tracks converged on one object) [PROPOSED]. Read on at most ``max_frames``
    uniformly spaced frames, so the cost does not grow with the clip."""
    t_len = masks.shape[1]
    sub = np.unique(np.linspace(0, t_len - 1, min(t_len, max_frames)).astype(int))
    m = masks[:, sub].reshape(len(masks), len(sub), -1)
    keep: list[int] = []
    for k in range(len(m)):
        duplicate = False
        for j in keep:
            inter = np.logical_and(m[k], m[j]).sum(1)
            union = np.logical_or(m[k], m[j]).sum(1)
            seen = union > 0
            if seen.any() and np.mean(inter[seen] > iou * union[seen]) >= share:
                duplicate = True
                break
        if not duplicate:
            keep.append(k)
    return keep


class ClearPipeline(Pipeline):
    """CLEAR with a ``planner`` (instance selector), a ``tracker`` and a ``proposer`` component."""

    component_specs = COMPONENT_SPECS
    config_class = ClearConfig

    _selections = 0
    _phrase: str | None = None

    @staticmethod
    def marks_image(frame: np.ndarray, marks: list[Mark], min_side: int = 384, chosen: int | None = None) -> np.ndarray:
        """The numbered candidates on the anchor frame, enlarged so the numbers are legible; the ``chosen``
        candidate drawn over them with a thick white outline, so the picture shows the planner's pick."""
        from core.frames import resize_frame, resize_frames
        from planners.counterfactual import set_of_marks

        k = max(1, int(np.ceil(min_side / min(frame.shape[:2]))))
        size = (frame.shape[0] * k, frame.shape[1] * k)
        big = [Mark(m.number, resize_frames(np.asarray(m.masks, np.uint8)[None], size, "nearest")[0] > 0) for m in marks]
        image = set_of_marks(resize_frame(frame, size, "nearest"), big, thickness=2)[0]
        pick = next((m for m in big if m.number == chosen), None)
        if pick is not None and pick.masks.any():
            contours, _ = cv2.findContours(pick.masks.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
            cv2.drawContours(image, contours, -1, (255, 255, 255), max(3, 2 * k // 3))
        return image

    def max_candidates(self) -> int:
        """The configured cap, within what the planner can tell apart (a VLM's nine numbers)."""
        return min(self.config.max_candidates, int(getattr(self.planner, "max_marks", self.config.max_candidates)))

    def planner_calls(self) -> int:
        """Model calls the planner made (its own count where it keeps one, else one per selection)."""
        return int(getattr(self.planner, "calls", self._selections))

    def check_inputs(self, query: str) -> None:
        if not isinstance(query, str) or not query.strip():
            raise InputError("query", query, "say what to segment, e.g. 'the red circle that disappears first'")
        if len(query) > MAX_QUERY_CHARS:
            raise InputError("query", f"{len(query)} characters", f"keep it under {MAX_QUERY_CHARS} characters")

    def sample_proposals(self, source) -> list[tuple[int, list[Candidate]]]:
        """Proposals on ``anchor_samples`` uniformly spaced frames."""
        n = len(source)
        k = min(self.config.anchor_samples, n)
        indices = sorted({int(i) for i in ((np.arange(k) + 0.5) * n / k).astype(int)})
        return [(i, self.propose(np.asarray(source.get_frames([i]))[0])) for i in indices]

    def propose(self, frame: np.ndarray) -> list[Candidate]:
        """The proposer on one frame, told the query's noun phrase (a concept proposer needs it; others ignore it)."""
        return self.proposer.propose(frame, self._phrase)

    def candidate_tracks(self, source, samples, callback: Callable | None):
        """Tracks of every object seen on the sampled frames: the anchor's candidates first (the
        sampled frame with the most proposals; ties go to the earliest), then, frame by frame, each
        proposal no track covers yet (an object that appears late or leaves early), tracked from its
        own frame. Returns ``(anchor, candidates renumbered 1..N, their prompt frames, masks (N, T, H, W),
        presence (N, T))``."""
        anchor, first = max(samples, key=lambda s: (len(s[1]), -s[0]))
        n, (h, w) = len(source), first[0].mask.shape
        cands, starts, masks, presence = [], [], [], []
        step = 0
        for frame, props in [(anchor, first)] + [s for s in samples if s[0] != anchor]:
            covered = np.stack(masks)[:, frame] if masks else np.zeros((0, h, w), bool)
            new = [c for c in props if all(mask_iou(c.mask, m) < self.config.new_object_iou for m in covered)]
            new = new[: self.max_candidates() - len(cands)]  # proposals come best first
            if not new:
                continue
            m, p, step = self.track(source, frame, new, callback, step)
            for k, c in enumerate(new):
                cands.append(dataclasses.replace(c, id=len(cands) + 1))
                starts.append(frame)
                masks.append(m[k])
                presence.append(p[k])
        keep = distinct_tracks(np.stack(masks), self.config.duplicate_iou)
        cands = [dataclasses.replace(cands[k], id=i + 1) for i, k in enumerate(keep)]
        return anchor, cands, [starts[k] for k in keep], np.stack([masks[k] for k in keep]), np.stack([presence[k] for k in keep])

    def selection_indices(self, n: int) -> list[int]:
        """The ``selection_frames`` frames of the candidate tracks the planner sees."""
        return selection_indices(n, self.config.selection_frames)

    def track(self, source, frame: int, cands: list[Candidate], callback: Callable | None, step: int = 0):
        """``cands`` prompted on ``frame`` in one session, propagated both ways: masks ``(N, T, H, W)``,
        presence ``(N, T)``, and the callback's next step number."""
        n, (h, w) = len(source), cands[0].mask.shape
        masks = np.zeros((len(cands), n, h, w), bool)
        presence = np.zeros((len(cands), n), np.float32)
        session = self.tracker.init_session(source, window=self.config.window)
        for k, c in enumerate(cands):
            session.add_prompt(frame, k + 1, mask=c.mask)
        for reverse in (False, True):
            steps = frame + 1 if reverse else n - frame
            desc = f"CLEAR tracking {len(cands)} candidates from frame {frame} " + ("backward" if reverse else "forward")
            for out in self.progress_bar(session.propagate(start_frame=frame, reverse=reverse), total=steps, desc=desc):
                for obj, m, sc in zip(out.obj_ids, out.masks, out.scores):
                    masks[obj - 1, out.frame_idx], presence[obj - 1, out.frame_idx] = m, sc
                self.step_end(callback, step, {"stage": "track candidates", "frame": out.frame_idx})
                step += 1
        return masks, presence, step

    @staticmethod
    def _no_match(query, anchor, shape, selection, seconds, calls, config) -> ClearOutput:
        return ClearOutput(query=query, target_id=None, no_match=True, ambiguous=False, anchor_frame=anchor, track_frame=anchor,
                           selection=selection.to_dict(), events=[], modes=["fast"] * shape[0], planner_calls=calls,
                           seconds=seconds, masks=np.zeros(shape, np.uint8), config=config)

    def __call__(self, video: Any, query: str, *, generator: Any = None, callback_on_step_end: Callable | None = None,
                 output_type: str = "np") -> ClearOutput:
        """Segment the object ``query`` describes in ``video`` (a path, ``Video``, uint8 array or frame source).

        CLEAR draws no random numbers: ``generator`` is checked and unused. ``callback_on_step_end``
        runs after each tracked frame; ``interrupt()`` stops at the next one."""
        self._begin_call()
        make_generator(generator)
        self.check_inputs(query)
        self._phrase = concept_phrase(query)
        t0 = time.perf_counter()
        source, size = self.working_source(video)
        n = len(source)
        if n < 1:
            raise InputError("video", f"{n} frames", "the video has no frames")
        config = dataclasses.asdict(self.config)
        h, w = np.asarray(source.get_frames([0])).shape[1:3]
        self.check_memory(n, (h, w), size)  # before any work: the frames, the tracks, the overlay and the masks at the input's size
        source = self.decoded(source)
        samples = self.sample_proposals(source)
        calls0 = self.planner_calls()
        if not any(c for _, c in samples):
            sel = Selection(None, False, 1.0, [], ["no candidate objects were found"])
            return self._no_match(query, samples[0][0], (n, *size), sel, {"total": time.perf_counter() - t0}, 0, config).convert(output_type)
        anchor, cands, starts, tracks, presence = self.candidate_tracks(source, samples, callback_on_step_end)
        t_track = time.perf_counter()
        sub = self.selection_indices(n)
        frames = np.asarray(source.get_frames(sub))
        sel = self.planner.select(frames, [Mark(c.id, tracks[j][sub]) for j, c in enumerate(cands)], query)
        self._selections += 1
        t_sel = time.perf_counter()
        anchor_rgb = np.asarray(source.get_frames([anchor]))[0]
        marks_img = self.marks_image(anchor_rgb, [Mark(c.id, tracks[k][anchor]) for k, c in enumerate(cands)],
                                     chosen=None if sel.no_match else sel.number)
        seconds = {"track": t_track - t0, "select": t_sel - t_track}
        if sel.no_match:
            seconds["total"] = time.perf_counter() - t0
            out = self._no_match(query, anchor, (n, *size), sel, seconds, self.planner_calls() - calls0, config)
            return dataclasses.replace(out, marks=marks_img).convert(output_type)
        j = next(i for i, c in enumerate(cands) if c.id == sel.number)
        target = tracks[j].copy()
        events, modes = [], ["fast"] * n
        if self.config.monitor:
            def still_the_target(current: np.ndarray) -> bool:  # the heartbeat: the planner's choice with the track as it is now
                marks = [Mark(c.id, (current if i == j else tracks[i])[sub]) for i, c in enumerate(cands)]
                self._selections += 1
                return self.planner.select(frames, marks, query).number == sel.number

            target, events, modes = self.watch(source, starts[j], cands, j, tracks, presence[j], target, still_the_target)
        seconds["total"] = time.perf_counter() - t0
        return ClearOutput(query=query, target_id=sel.number, no_match=False, ambiguous=sel.ambiguous, anchor_frame=anchor, track_frame=starts[j],
                           selection=sel.to_dict(), events=events, modes=modes,
                           planner_calls=self.planner_calls() - calls0, seconds=seconds,
                           masks=_at_size(target, size), marks=marks_img, overlay=self.overlay(source, target),
                           config=config).convert(output_type)

    def working_source(self, video: Any):
        """``(frame source, the input's (H, W))``: the video decoded at most ``max_side`` on its longer side
        (paths, ``Video``s and arrays; any other frame source as it is), so nothing larger is ever decoded,
        with a file's colour upsampled as ``chroma`` says."""
        from core.video import Video, with_chroma

        real = component_backend(self.tracker) == "hf"
        chroma = self.config.chroma if self.config.chroma != "auto" else ("plain" if real else "guided")
        if isinstance(video, str) or hasattr(video, "__fspath__"):
            video = Video(video, chroma=chroma)
        elif isinstance(video, Video):
            video = with_chroma(video, chroma)
        source = open_source(video)
        h, w = np.asarray(source.get_frames([0])).shape[1:3] if len(source) else (0, 0)
        limit = self.config.max_side
        if limit is None:
            limit = 1024 if real else 256
        if not limit or max(h, w) <= limit or not isinstance(video, (Video, np.ndarray)):
            return source, (h, w)
        scale = limit / max(h, w)
        size = {"height": max(2, round(h * scale)), "width": max(2, round(w * scale))}
        if isinstance(video, np.ndarray):
            return Video(video, **size), (h, w)
        return video.reopen(**size), (h, w)

    def decoded(self, source):
        """The working-size frames decoded once, in order, and held (``check_memory`` counted them): every tracker
        session reads them forward and backward, and a file read backward frame by frame decodes from a keyframe each
        time (the 720p real clip: 23 of its 37 s). Sources that are not files stay as they are."""
        from core.video import Video

        if not isinstance(source, Video) or source.info.backend == "array":
            return source
        frames = np.stack(list(self.progress_bar(source, total=len(source), desc="CLEAR decoding")))
        return Video(frames, fps=source.fps)

    def check_memory(self, n: int, work: tuple[int, int], size: tuple[int, int]) -> None:
        """Refuse a request too large for memory before any work, naming the setting that shrinks it."""
        h, w = work
        frames = n * h * w * 3  # the working-size frames, decoded once (``decoded``)
        tracks = n * self.max_candidates() * h * w  # boolean candidate tracks, the largest buffer
        overlay = 2 * n * h * w * 3 if self.config.overlay else 0
        masks = n * size[0] * size[1]
        check_allocation("video", f"{n} frames at {w}x{h}", frames + tracks + overlay + masks,
                         "lower max_side (--max-side), max_candidates (--max-candidates), pass --no-overlay, or use a shorter clip")

    def overlay(self, source, target: np.ndarray) -> np.ndarray | None:
        """The frames with the target drawn on them (``config.overlay``), bounded by memory."""
        if not self.config.overlay:
            return None
        from core.overlay import draw_masks

        n, h, w = target.shape
        check_allocation("overlay", f"{n} frames of {w}x{h}", 2 * n * h * w * 3, "pass overlay=False for a long video")
        return draw_masks(np.asarray(source.get_frames(list(range(n)))), target.astype(np.uint8), alpha=0.5)

    def watch(self, source, anchor: int, cands: list[Candidate], j: int, tracks: np.ndarray, presence: np.ndarray,
              target: np.ndarray, check: Callable[[np.ndarray], bool] | None = None) -> tuple[np.ndarray, list[dict], list[str]]:
        """Fast mode from the anchor to the end and from the anchor back to the first frame, each
        pass under its own monitor; slow re-anchoring on escalation (``repair``; without it the
        escalations are only recorded, action ``flag``). ``check(target)``: the heartbeat's planner
        check of the whole track as it stands (False fires HEARTBEAT_FAIL); only while repairing."""
        n = len(source)
        anchor_rgb = np.asarray(source.get_frames([anchor]))[0]
        concept = ConceptDictionary()
        concept.add_anchor(appearance(anchor_rgb, cands[j].mask), anchor)
        for i in range(len(cands)):
            other = appearance(anchor_rgb, tracks[i][anchor]) if i != j else None
            # a distractor that looks just like the target carries no contrast (same colour: only the
            # planner can tell them apart), and would make every frame look like a switch [PROPOSED]
            if other is not None and float(other @ concept.positive[0]) < self.config.contrast_cosine:
                concept.add_distractor(other)
        # other candidates' tracks, except those already on the target at the anchor (a duplicate
        # track is no evidence of a switch)
        others = [i for i in range(len(cands)) if i != j and mask_iou(tracks[i][anchor], tracks[j][anchor]) <= 0.5]
        events: list[dict] = []
        modes = ["fast"] * n
        for reverse in (False, True):
            self._watch_pass(source, anchor, reverse, cands[j].mask, concept, {i + 1: tracks[i] for i in others}, presence, target, events, modes,
                             check)
        events.sort(key=lambda e: e["frame"])
        return target, events, modes

    def _watch_pass(self, source, anchor: int, reverse: bool, anchor_mask: np.ndarray, concept: ConceptDictionary, others: dict,
                    presence: np.ndarray, target: np.ndarray, events: list[dict], modes: list[str],
                    check: Callable[[np.ndarray], bool] | None) -> None:
        n = len(source)
        mcfg = self.config.monitor_config()
        monitor, controller = EventMonitor(mcfg), ModeController(mcfg)
        monitor.set_prototypes(concept.positive, list(concept.negative))
        monitor.confirm(anchor_mask)
        confirmed = anchor_mask
        last_event, lost = None, None  # lost: the frame the target was lost on
        order = range(anchor, -1, -1) if reverse else range(anchor, n)
        desc = f"CLEAR watching the target {'backward' if reverse else 'forward'} from frame {anchor}"
        for t in self.progress_bar(order, total=len(order), desc=desc):
            rgb = np.asarray(source.get_frames([t]))[0]
            others_now = [m[t] for m in others.values()]
            if lost is not None:  # the target is not on screen: look for it where it should be, frame by frame
                modes[t] = "lost"
                found = self.relocate(rgb, concept, monitor, t, others_now, abs(t - lost))
                if found is None:
                    target[t], presence[t] = False, 0.0
                    continue
                lost = None
                self._restart(source, t, found, reverse, target, presence, monitor)
                events.append({"frame": t, "kind": "RELOCATED", "value": 1.0, "threshold": 1.0, "hard": False, "action": "re-anchor"})
                confirmed = found
            emb = appearance(rgb, target[t]) if target[t].any() else None
            fired = monitor.update(t, target[t], float(presence[t]), frame=rgb, embedding=emb,
                                   others={k: m[t] for k, m in others.items()})
            if t == anchor and reverse:
                continue  # the forward pass watched the anchor frame
            if self.config.repair and check is not None and any(e.check for e in fired) and not check(target):
                fired.append(MonitorEvent(t, "HEARTBEAT_FAIL", 0.0, 1.0))
            mode = controller.decide(t, fired)
            action = ("re-anchor" if self.config.repair else "flag") if mode == "slow" else "continue"
            events += [{**e.to_dict(), "action": action} for e in fired if not e.check]
            last_event = t if any(not e.check for e in fired) else last_event
            if mode == "slow" and self.config.repair:
                modes[t] = "slow"
                verdict, new = self.reanchor(rgb, concept, confirmed, monitor, t, target[t], others_now)
                if verdict == "switch":
                    self._restart(source, t, new, reverse, target, presence, monitor)
                    confirmed = new
                elif verdict == "lost":
                    target[t], presence[t], lost = False, 0.0, t
                elif target[t].any():  # kept: slow mode re-grounded this mask, the monitor's references restart from it
                    monitor.confirm(target[t])
                    confirmed = target[t]
            elif emb is not None and concept.admit(emb, t, last_event_frame=last_event):
                monitor.set_prototypes(concept.positive, list(concept.negative))
                confirmed = target[t]

    def _restart(self, source, t: int, mask: np.ndarray, reverse: bool, target: np.ndarray, presence: np.ndarray,
                 monitor: EventMonitor) -> None:
        span = slice(None, t + 1) if reverse else slice(t, None)
        target[span], presence[span] = self.retrack(source, t, mask, reverse)
        monitor.confirm(mask)

    def _fit(self, rgb: np.ndarray, concept: ConceptDictionary, monitor: EventMonitor, frame_idx: int, last: np.ndarray | None):
        """How well a mask fits the target on this frame, and its distance in object sizes from where
        the target should be (the monitor's constant-velocity prediction; None when it has no path)."""
        predicted = monitor.predicted_centroid(frame_idx)
        size = np.sqrt(max(1.0, monitor.reference_area() or (float(last.sum()) if last is not None else 1.0)))

        def fit(mask: np.ndarray) -> tuple[float, float | None]:
            score = concept.score(appearance(rgb, mask))
            if last is not None:
                score += self.config.reanchor_overlap * mask_iou(mask, last)
            distance = None if predicted is None else float(np.linalg.norm(centroid(mask) - predicted)) / size
            if distance is not None:
                score -= self.config.reanchor_motion * distance
            return score, distance

        return fit

    def reanchor(self, rgb: np.ndarray, concept: ConceptDictionary, last: np.ndarray, monitor: EventMonitor,
                 frame_idx: int, current: np.ndarray, others: list[np.ndarray]) -> tuple[str, np.ndarray | None]:
        """Slow mode's verdict on this frame: ``("switch", mask)`` to restart the tracker from a
        proposal, ``("keep", None)`` or ``("lost", None)`` (the target is not on screen).

        The options are the tracked mask and the proposals that are another object (IoU <= 0.5 with
        it), minus any that sit on another candidate's track (that object has its own track) or do
        not look more like the target than like a distractor, minus any further than ``lost_gate``
        object sizes from where the target should be. Each is scored by the dictionary, its overlap
        with the last confirmed mask and its distance from the prediction [PROPOSED weights]; the
        best wins, and with no option left the target is lost."""
        fit = self._fit(rgb, concept, monitor, frame_idx, last)
        options = [("keep", current)] if current.any() and not _on_any(current, others) else []
        options += [("switch", m) for m in self._target_like(rgb, concept, others) if mask_iou(m, current) <= 0.5]
        scored = [(kind, mask, *fit(mask)) for kind, mask in options]
        scored = [o for o in scored if o[3] is None or o[3] <= self.config.lost_gate]
        if not scored:
            return ("lost", None) if monitor.predicted_centroid(frame_idx) is not None else ("keep", None)
        kind, mask, _, _ = max(scored, key=lambda o: o[2])
        return kind, (mask if kind == "switch" else None)

    def relocate(self, rgb: np.ndarray, concept: ConceptDictionary, monitor: EventMonitor, frame_idx: int,
                 others: list[np.ndarray], frames_lost: int) -> np.ndarray | None:
        """While lost: the proposal that looks like the target, is on no other candidate's track and
        is near where the target should be by now, if any: within ``lost_gate`` object sizes, plus
        ``lost_gate_growth`` per frame lost (the prediction's error grows) [PROPOSED]."""
        gate = self.config.lost_gate + self.config.lost_gate_growth * frames_lost
        fit = self._fit(rgb, concept, monitor, frame_idx, None)
        best, best_score = None, -np.inf
        for mask in self._target_like(rgb, concept, others):
            score, distance = fit(mask)
            if (distance is None or distance <= gate) and score > best_score:
                best, best_score = mask, score
        return best

    def _target_like(self, rgb: np.ndarray, concept: ConceptDictionary, others: list[np.ndarray]) -> list[np.ndarray]:
        """This frame's proposals that sit on no other candidate's track (that object has its own) and
        look more like the target than like a distractor."""
        return [c.mask for c in self.propose(rgb) if not _on_any(c.mask, others) and concept.score(appearance(rgb, c.mask)) > 0]

    def retrack(self, source, start: int, mask: np.ndarray, reverse: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """A fresh session prompted with ``mask`` at ``start``, propagated to the end (or back to the
        first frame): (masks, presence) of those frames in frame order."""
        session = self.tracker.init_session(source, window=self.config.window)
        session.add_prompt(start, 1, mask=mask)
        first = 0 if reverse else start
        count = start + 1 if reverse else len(source) - start
        masks = np.zeros((count, *mask.shape), bool)
        scores = np.zeros(count, np.float32)
        for f in session.propagate(start_frame=start, reverse=reverse):
            masks[f.frame_idx - first], scores[f.frame_idx - first] = f.masks[0], f.scores[0]
        return masks, scores


__all__ = ["ClearPipeline", "ClearConfig", "ClearOutput", "InstanceSelector", "appearance", "concept_phrase"]
