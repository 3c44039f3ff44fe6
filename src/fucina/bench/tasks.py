"""The task files ``fucina bench`` and its tools read: JSONL, one :class:`Task` a line.

Fields: ``id``, ``kind``, ``group``, ``prompt``, ``references`` (documents injected as speculation
references, never put in the prompt), ``gen`` (tokens) and ``temperature`` (0 = greedy), as the
Spec-Bench task builder (``make_tasks.py`` beside the bench data) writes them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from fucina.errors import FucinaError
from fucina.speculative.index import MAX_REFERENCES

__all__ = ["Task", "TaskFileError", "load_tasks", "parse_tasks", "select_tasks"]


class TaskFileError(FucinaError):
    """The task file is unreadable or a line is not a valid task; the message names the line."""


@dataclass(frozen=True)
class Task:
    """One benchmark task (a line of the task file)."""

    id: str
    kind: str
    group: str
    prompt: str
    references: tuple[str, ...]
    gen: int
    temperature: float

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

_FIELDS = ("id", "kind", "group", "prompt", "references", "gen", "temperature")


def _task_from(obj: object, where: str) -> Task:
    if not isinstance(obj, dict):
        raise TaskFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [f for f in _FIELDS if f not in obj]
    if missing:
        raise TaskFileError(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    for name in ("id", "kind", "group", "prompt"):
        if not isinstance(obj[name], str) or not obj[name].strip():
            raise TaskFileError(f"{where}: field {name} must be a non-empty string")
    refs = obj["references"]
    if not isinstance(refs, list) or not all(isinstance(r, str) and r for r in refs):
        raise TaskFileError(f"{where}: field references must be a list of non-empty strings")
    if len(refs) > MAX_REFERENCES:
        raise TaskFileError(f"{where}: {len(refs)} references, at most {MAX_REFERENCES}")
    gen = obj["gen"]
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 1:
        raise TaskFileError(f"{where}: field gen must be an integer >= 1, got {gen!r}")
    temp = obj["temperature"]
    if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or temp < 0:
        raise TaskFileError(f"{where}: field temperature must be a number >= 0, got {temp!r}")
    return Task(obj["id"], obj["kind"], obj["group"], obj["prompt"], tuple(refs), gen, float(temp))


def parse_tasks(lines: Iterable[str], source: str = "tasks") -> list[Task]:
    """Parse JSONL task lines (blank lines skipped); raises TaskFileError naming ``source:line``."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        task = _task_from(obj, where)
        if task.id in seen:
            raise TaskFileError(f"{where}: duplicate id {task.id!r} (first on line {seen[task.id]})")
        seen[task.id] = lineno
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{source}: no tasks")
    return tasks


def load_tasks(path: str | Path) -> list[Task]:
    """Read and validate a task file."""
    from fucina.files import read_utf8

    return parse_tasks(read_utf8(path, "task file", TaskFileError).splitlines(), str(path))


def select_tasks(tasks: Sequence[Task], groups: Sequence[str] | None = None, per_group: int | None = None,
                 limit: int | None = None, gen: int | None = None) -> list[Task]:
    """Filter by ``groups`` (unknown names raise), keep ``per_group`` per group then ``limit`` in all,
    and override every task's ``gen`` when given. Task-file order is kept."""
    known = list(dict.fromkeys(t.group for t in tasks))
    if groups:
        unknown = [g for g in groups if g not in known]
        if unknown:
            raise TaskFileError(f"no task in group(s) {', '.join(unknown)}; groups: {', '.join(known)}")
        tasks = [t for t in tasks if t.group in set(groups)]
    if per_group is not None:
        counts: dict[str, int] = {}
        kept = []
        for t in tasks:
            counts[t.group] = counts.get(t.group, 0) + 1
            if counts[t.group] <= per_group:
                kept.append(t)
        tasks = kept
    if limit is not None:
        tasks = list(tasks)[:limit]
    if gen is not None:
        tasks = [Task(t.id, t.kind, t.group, t.prompt, t.references, gen, t.temperature) for t in tasks]
    if not tasks:
        raise TaskFileError("no tasks left after --groups/--per-group/--limit")
    return list(tasks)
