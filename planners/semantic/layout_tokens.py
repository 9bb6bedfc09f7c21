"""The builtin Bernini planner's scene layout: the discrete decisions a caption leaves open, as a short token
sequence the planner writes before its plan (its chain of thought, spec b.9) [PROPOSED: the paper's chain of
thought is free text; this is the small structured form a model of this size can learn by cross-entropy].

    vocab = LayoutVocab.from_dict(config["layout_vocab"])      # saved beside the weights, written by training
    ids = vocab.encode(layout)                                  # a SceneLayout -> token ids
    vocab.decode(ids).text()                                    # "background: checker, tone 2; 1. red star, large, ..."

A layout is the background (kind and tone) and up to ``max_objects`` objects, each with its colour, shape, size,
motion kind and its place on each plan frame: a cell of a ``cells x cells`` grid over the canvas, or absent.
The sequence::

    BOS bg_kind bg_tone [colour shape size motion start move_1 .. move_{T'-1}] x n EOS

``start`` is the object's cell on the first plan frame (or absent); each ``move`` is its step (dx, dy) in cells
from where it was last seen (the canvas centre before it first appears), clipped to ``move_radius``, or absent.
Moves, not places, because "moves to the left" is the sign of dx, one class among a few likely ones; a writer
that had to pick each frame's place among 256 learned to keep every object still (direction 0-12% of VAL
objects at step 2,300, where its colours and shapes were 84-91% right).

Which field comes next is fixed by the position, so ``allowed(prefix)`` is the grammar a sampler masks with.
The names of every value are saved with the weights (a vocabulary, not code), so inference never reads worldgen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import InputError

SPECIALS = ("<pad>", "<bos>", "<eos>")
PAD, BOS, EOS = 0, 1, 2
OBJECT_FIELDS = ("color", "shape", "size", "motion")
SCENE_FIELDS = ("bg_kind", "bg_tone")


@dataclass
class LayoutObject:
    """One object of a layout: names from the vocabulary, ``cells`` one per plan frame (None: absent)."""

    color: str
    shape: str
    size: str
    motion: str
    cells: list[int | None]


@dataclass
class SceneLayout:
    bg_kind: str
    bg_tone: str
    objects: list[LayoutObject] = field(default_factory=list)

    def text(self, cells: int = 16) -> str:
        """The layout in words (what ``cot_text`` shows): places as (column, row) of the grid, left to right and
        top to bottom from 0."""
        parts = [f"background: {self.bg_kind}, tone {self.bg_tone}"]
        for k, o in enumerate(self.objects, 1):
            where = " -> ".join("absent" if c is None else f"({c % cells}, {c // cells})" for c in o.cells)
            parts.append(f"{k}. {o.color} {o.shape}, {o.size}, {o.motion}: {where}")
        return "; ".join(parts)


@dataclass(frozen=True)
class LayoutVocab:
    """The value names of every field, the grid and the plan frames; token ids follow from them."""

    bg_kind: tuple[str, ...]
    bg_tone: tuple[str, ...]
    color: tuple[str, ...]
    shape: tuple[str, ...]
    size: tuple[str, ...]
    motion: tuple[str, ...]
    cells: int = 16
    plan_frames: int = 4
    max_objects: int = 6
    move_radius: int = 7

    @classmethod
    def from_dict(cls, d: dict) -> LayoutVocab:
        try:
            return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
        except TypeError as e:
            raise InputError("layout_vocab", sorted(d), f"not a layout vocabulary ({e})") from None

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    # ---- ids
    def _fields(self) -> list[tuple[str, int]]:
        """(field, number of values) in id order; ``cell`` has one more value: absent."""
        moves = (2 * self.move_radius + 1) ** 2 + 1
        return [(f, len(getattr(self, f))) for f in (*SCENE_FIELDS, *OBJECT_FIELDS)] + [("cell", self.cells * self.cells + 1), ("move", moves)]

    @property
    def offsets(self) -> dict[str, tuple[int, int]]:
        out, start = {}, len(SPECIALS)
        for name, n in self._fields():
            out[name] = (start, start + n)
            start += n
        return out

    @property
    def size_total(self) -> int:
        return max(b for _, b in self.offsets.values())

    @property
    def object_length(self) -> int:
        return len(OBJECT_FIELDS) + self.plan_frames

    @property
    def max_length(self) -> int:
        return 1 + len(SCENE_FIELDS) + self.max_objects * self.object_length + 1

    def field_at(self, position: int) -> str:
        """What the token at ``position`` of a sequence is (0: BOS); ``object`` fields' start may also be EOS."""
        if position == 0:
            return "bos"
        if position <= len(SCENE_FIELDS):
            return SCENE_FIELDS[position - 1]
        k = (position - 1 - len(SCENE_FIELDS)) % self.object_length
        return OBJECT_FIELDS[k] if k < len(OBJECT_FIELDS) else "cell" if k == len(OBJECT_FIELDS) else "move"

    def allowed(self, position: int) -> tuple[int, int, bool]:
        """The id range ``[a, b)`` allowed at ``position`` and whether EOS is allowed there too (only where an
        object may start: after at least one object; it is the only choice after ``max_objects``)."""
        name = self.field_at(position)
        if name == "bos":
            return BOS, BOS + 1, False
        start = 1 + len(SCENE_FIELDS)
        n_done, k = divmod(position - start, self.object_length)
        if position >= start and k == 0 and n_done >= self.max_objects:
            return EOS, EOS + 1, True
        a, b = self.offsets[name]
        return a, b, position >= start and k == 0 and n_done >= 1

    # ---- encode / decode
    def _id(self, name: str, value: str) -> int:
        values = getattr(self, name)
        if value not in values:
            raise InputError(name, value, f"not in the layout vocabulary; choose one of {values}")
        return self.offsets[name][0] + values.index(value)

    def cell_id(self, cell: int | None) -> int:
        a, b = self.offsets["cell"]
        if cell is None:
            return b - 1
        if not 0 <= cell < b - a - 1:
            raise InputError("cell", cell, f"use 0..{b - a - 2} or None (absent)")
        return a + cell

    def move_id(self, step: tuple[int, int] | None) -> int:
        a, b = self.offsets["move"]
        if step is None:
            return b - 1
        r, side = self.move_radius, 2 * self.move_radius + 1
        dx, dy = (min(max(int(d), -r), r) for d in step)
        return a + (dy + r) * side + (dx + r)

    def _moves(self, cells: list[int | None]) -> list[int]:
        """A track's start and move ids (see the module docstring)."""
        n = self.cells
        anchor = (n // 2, n // 2)
        ids = [self.cell_id(cells[0])]
        if cells[0] is not None:
            anchor = divmod(cells[0], n)
        for c in cells[1:]:
            if c is None:
                ids.append(self.move_id(None))
                continue
            y, x = divmod(c, n)
            dx, dy = (min(max(d, -self.move_radius), self.move_radius) for d in (x - anchor[1], y - anchor[0]))
            ids.append(self.move_id((dx, dy)))
            anchor = (min(max(anchor[0] + dy, 0), n - 1), min(max(anchor[1] + dx, 0), n - 1))
        return ids

    def _cells(self, ids: list[int]) -> list[int | None]:
        """The inverse of ``_moves``: places on the grid, clipped to it."""
        n, (ca, cb), (ma, mb) = self.cells, self.offsets["cell"], self.offsets["move"]
        side, r = 2 * self.move_radius + 1, self.move_radius
        if not ca <= ids[0] < cb or any(not ma <= i < mb for i in ids[1:]):
            raise InputError("layout", ids, "an object's start is not a cell or its moves are not moves")
        first = None if ids[0] == cb - 1 else ids[0] - ca
        cells, anchor = [first], (n // 2, n // 2) if first is None else divmod(first, n)
        for i in ids[1:]:
            if i == mb - 1:
                cells.append(None)
                continue
            dy, dx = (d - r for d in divmod(i - ma, side))
            anchor = (min(max(anchor[0] + dy, 0), n - 1), min(max(anchor[1] + dx, 0), n - 1))
            cells.append(anchor[0] * n + anchor[1])
        return cells

    def encode(self, layout: SceneLayout) -> list[int]:
        if not 1 <= len(layout.objects) <= self.max_objects:
            raise InputError("objects", len(layout.objects), f"a layout holds 1..{self.max_objects} objects")
        ids = [BOS, self._id("bg_kind", layout.bg_kind), self._id("bg_tone", layout.bg_tone)]
        for o in layout.objects:
            if len(o.cells) != self.plan_frames:
                raise InputError("cells", len(o.cells), f"give one cell per plan frame ({self.plan_frames})")
            ids += [self._id(f, getattr(o, f)) for f in OBJECT_FIELDS] + self._moves(o.cells)
        return ids + [EOS]

    def decode(self, ids: list[int]) -> SceneLayout:
        """A layout from a sequence that follows the grammar (a sampler's output; a truncated last object is dropped)."""
        ids = [int(i) for i in ids]
        if ids[:1] == [BOS]:
            ids = ids[1:]
        if len(ids) < 2:
            raise InputError("layout", ids, "a layout starts with the background kind and tone")
        value = {name: (a, getattr(self, name)) for name, (a, _) in self.offsets.items() if name not in ("cell", "move")}

        def name_of(f: str, i: int) -> str:
            a, values = value[f]
            if not 0 <= i - a < len(values):
                raise InputError("layout", ids, f"token {i} is not a {f}")
            return values[i - a]

        out = SceneLayout(name_of("bg_kind", ids[0]), name_of("bg_tone", ids[1]))
        rest = ids[2:]
        n = self.object_length
        while len(rest) >= n and rest[0] != EOS:
            chunk, rest = rest[:n], rest[n:]
            out.objects.append(LayoutObject(*(name_of(f, i) for f, i in zip(OBJECT_FIELDS, chunk)), self._cells(chunk[len(OBJECT_FIELDS):])))
        return out
