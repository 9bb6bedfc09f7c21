"""CLEAR's pictures: the event timeline (mode per frame, events as ticks)."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

FAST, SLOW, LOST, EMPTY = (70, 110, 160), (235, 130, 40), (150, 90, 170), (45, 45, 45)
HARD, SOFT = (220, 50, 50), (240, 200, 60)
SHORT = {"DISAPPEAR": "DIS", "REAPPEAR": "REA", "SCALE_JUMP": "SCL", "SHAPE_DRIFT": "DRF", "LOW_CONF": "LOW", "ID_SWITCH": "ID",
         "APPEAR_DRIFT": "APP", "JUMP": "JMP", "MOTION_BREAK": "MOV", "SIZE_DRIFT": "SIZ", "TRACK_MERGE": "MRG", "OUTLINE_DRIFT": "OUT", "SCENE_CUT": "CUT",
         "HEARTBEAT_FAIL": "HB", "RELOCATED": "REL"}


def timeline_image(modes: Sequence[str], events: Sequence[dict], present: Sequence[bool] | None = None,
                   width: int = 720) -> np.ndarray:
    """A strip with one column per frame (blue fast, orange slow re-anchoring, purple lost: searched
    for where it should be, dark where the target is not on screen), ticks for events (red where the
    controller escalated, yellow otherwise) labelled below, and frame numbers."""
    n = max(1, len(modes))
    bar_h, pad, row_h = 22, 6, 11
    stacked: dict[int, int] = {}
    for e in events:
        stacked[int(e["frame"])] = stacked.get(int(e["frame"]), 0) + 1
    labels_h = 18 + row_h * max(1, max(stacked.values(), default=1))
    img = np.full((pad + bar_h + labels_h + 30, width, 3), 255, np.uint8)
    x = lambda f: pad + int(round(f * (width - 2 * pad) / n))  # noqa: E731
    for f, mode in enumerate(modes):
        colour = {"slow": SLOW, "lost": LOST}.get(mode, EMPTY if present is not None and not present[f] else FAST)
        cv2.rectangle(img, (x(f), pad), (max(x(f), x(f + 1) - 1), pad + bar_h), colour, -1)
    seen: dict[int, int] = {}
    for e in events:
        f = int(e["frame"])
        cx = (x(f) + x(f + 1)) // 2
        colour = HARD if e.get("action") in ("re-anchor", "flag") or (e.get("hard") and "action" not in e) else SOFT
        cv2.line(img, (cx, pad), (cx, pad + bar_h + 6), colour, 2)
        row = seen.get(f, 0)
        seen[f] = row + 1
        cv2.putText(img, SHORT.get(e["kind"], e["kind"][:3]), (max(0, cx - 9), pad + bar_h + 18 + row_h * row),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.32, (30, 30, 30), 1, cv2.LINE_AA)
    axis_y = pad + bar_h + labels_h + 8
    for f in sorted({0, n - 1, *range(0, n, max(1, n // 8))}):
        cv2.putText(img, str(f), (x(f), axis_y), cv2.FONT_HERSHEY_SIMPLEX, 0.3, (90, 90, 90), 1, cv2.LINE_AA)
    lx = pad
    for name, colour in (("fast", FAST), ("slow", SLOW), ("lost", LOST), ("not on screen", EMPTY), ("escalated", HARD), ("event", SOFT)):
        cv2.rectangle(img, (lx, axis_y + 8), (lx + 10, axis_y + 16), colour, -1)
        cv2.putText(img, name, (lx + 14, axis_y + 16), cv2.FONT_HERSHEY_SIMPLEX, 0.32, (60, 60, 60), 1, cv2.LINE_AA)
        lx += 24 + 7 * len(name)
    return img
