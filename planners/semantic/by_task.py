"""Bernini's planner slot holding one planner per task: what the builtin backend ships [PROPOSED].

    planner = TaskPlanners({"t2v": layout, "r2v": layout, "v2v": semantic})
    planner.for_task("v2v")                    # the planner the pipeline asks for an edit
    planner.plan(request, grid=...)            # the planner of ``request.task``
    planner.save_pretrained(folder)            # config.json naming each task's sub-folder, one folder per planner

Why: the builtin layout planner (``layout_planner``) writes a scene's layout, then paints the plan, and on 200 TEST
items raised t2v colour from 67.2 to 84.4% and r2v colour from 49.9 to 64.6% against the token planner
(``planner.SemanticPlanner``), at equal shape and subject; but it reads an edit's source badly (40% of its colours),
where the token planner edits the source's own tokens (v2v colour 69.2% on 30 VAL items, against the token planner's
82.7% on TEST). So each task goes to the planner that measured best on it (docs/BENCHMARKS.md, "Bernini"); the
pipeline asks ``for_task`` for the planner (and its config) of the task it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import InputError

MODEL_NAME = "task-planners"
TASKS = ("t2v", "v2v", "r2v")
ALIASES = {"t2i": "t2v", "i2v": "v2v", "rv2v": "v2v"}  # the builtin backend's other tasks, planned as these


class TaskPlanners:
    """One planner per task; ``plan`` hands a request to its task's planner."""

    backend = "builtin"

    def __init__(self, planners: dict[str, Any]):
        bad = sorted(set(planners) - set(TASKS))
        if bad or not planners:
            raise InputError("planners", sorted(planners), f"map some of {list(TASKS)} to a planner")
        self.planners = dict(planners)

    def for_task(self, task: str) -> Any:
        """The planner of ``task`` (``ALIASES``: of the task it is planned as)."""
        task = task if task in self.planners else ALIASES.get(task, task)
        if task not in self.planners:
            raise InputError("task", task, f"this planner plans {sorted(self.planners)} (and {sorted(ALIASES)} as those)")
        return self.planners[task]

    def plan(self, request: Any, **kwargs: Any) -> Any:
        return self.for_task(request.task).plan(request, **kwargs)

    def to(self, *args: Any, **kwargs: Any) -> TaskPlanners:
        for p in self._distinct():
            p.to(*args, **kwargs)
        return self

    def _distinct(self) -> list[Any]:
        out: list[Any] = []
        for p in self.planners.values():
            if all(p is not q for q in out):
                out.append(p)
        return out

    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        folders = {}
        for k, p in enumerate(self._distinct()):
            folders[id(p)] = f"planner_{k}"
            p.save_pretrained(directory / folders[id(p)])
        tasks = {task: folders[id(p)] for task, p in self.planners.items()}
        (directory / "config.json").write_text(json.dumps({"model": MODEL_NAME, "tasks": tasks}, indent=1))
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: Any = None, dtype: Any = None, **_: Any) -> TaskPlanners:
        from planners.semantic.loading import saved_planner

        directory = Path(directory)
        try:
            tasks = json.loads((directory / "config.json").read_text())["tasks"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError("planner", str(directory), f"no readable task map in config.json ({e})") from None
        if not isinstance(tasks, dict) or not all(isinstance(v, str) and "/" not in v and v not in ("", ".", "..") for v in tasks.values()):
            raise InputError("planner", str(directory), "config.json's tasks must map each task to a sub-folder name")
        loaded: dict[str, Any] = {}
        for name in dict.fromkeys(tasks.values()):
            planner = saved_planner(directory / name, device, dtype)
            if planner is None or isinstance(planner, TaskPlanners):
                raise InputError("planner", str(directory / name), "no semantic or layout planner there")
            loaded[name] = planner
        return cls({task: loaded[name] for task, name in tasks.items()})


__all__ = ["ALIASES", "MODEL_NAME", "TASKS", "TaskPlanners"]
