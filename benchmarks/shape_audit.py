"""Same-shape replay: an engine-independent, bitwise audit of a speculative run.

Batched rows on llama.cpp differ from single-step rows, so "speculative == plain" can fail through
no fault of the decoder. This audit sidesteps that: it records every forward the decoder made and
every row it sampled, then rebuilds the cache from the COMMITTED stream alone on a fresh model,
repeating each forward with exactly the same batch shape at the position the committed stream says
it belongs. Every sampled row must match bitwise, and every committed token must be the sampler's
pick on its row. A decoder that keeps a rejected row in the cache, skips or duplicates a position,
or samples with the wrong history fails it, on any engine build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np


@dataclass
class _Forward:
    all_logits: bool
    tokens: list[int]
    sampled: list[tuple[int, int, np.ndarray]] = field(default_factory=list)  # (row index, position, row)


class RecordingModel:
    """Wraps a model; records each forward and lets a row hook tag the rows that were sampled."""

    def __init__(self, model) -> None:
        self._m = model
        self.forwards: list[_Forward] = []
        self._rows_out: np.ndarray | None = None

    def __getattr__(self, name):
        return getattr(self._m, name)

    @property
    def kv_len(self) -> int:
        return self._m.kv_len

    def forward_step(self, tokens: Sequence[int]) -> np.ndarray:
        row = self._m.forward_step(tokens)
        self.forwards.append(_Forward(False, [int(t) for t in tokens]))
        self._rows_out = row[None, :]
        return row

    def forward_step_all_logits(self, tokens: Sequence[int]) -> np.ndarray:
        rows = self._m.forward_step_all_logits(tokens)
        self.forwards.append(_Forward(True, [int(t) for t in tokens]))
        self._rows_out = rows
        return rows

    def truncate(self, n: int) -> None:
        self._m.truncate(n)

    def reset(self) -> None:
        self._m.reset()

    def row_hook(self, row: np.ndarray, pos: int, history: Sequence[int]) -> None:
        """Pass as the decoder's ``row_hook``: tags which output row of which forward was sampled."""
        out = self._rows_out
        if out is not None:
            for i in range(out.shape[0]):
                if np.shares_memory(out[i], row):
                    f = self.forwards[-1]
                    f.sampled.append((i if f.all_logits else len(f.tokens) - 1, pos, np.array(row, copy=True)))
                    return
        # Not a view of the latest output: the prefill row, which the decoder copies before sampling.
        for f in reversed(self.forwards):
            if not f.all_logits:
                f.sampled.append((len(f.tokens) - 1, pos, np.array(row, copy=True)))
                return
        raise AssertionError("sampled a row that no recorded forward produced")


@dataclass(frozen=True)
class ReplayReport:
    forwards: int
    rows: int
    mismatched_rows: int
    wrong_picks: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems and self.mismatched_rows == 0 and self.wrong_picks == 0


def replay(rec: RecordingModel, fresh_model, committed: Sequence[int], make_sampler: Callable[[], object]) -> ReplayReport:
    """Rebuild from ``committed`` (prompt + output) on ``fresh_model`` with the recorded batch shapes."""
    fresh_model.reset()
    sampler = make_sampler()
    problems: list[str] = []
    rows = mism = wrong = 0
    picks: list[tuple[int, np.ndarray]] = []
    for n, f in enumerate(rec.forwards):
        if not f.sampled:
            continue
        idx0, pos0, _ = f.sampled[0]
        start = pos0 - 1 - idx0  # the forward's first token sits here in the committed stream
        if start > fresh_model.kv_len:
            problems.append(f"forward {n}: starts at {start} but only {fresh_model.kv_len} tokens precede it")
            break
        top = max(i for i, _, _ in f.sampled)
        if f.tokens[: top + 1] != list(committed[start : start + top + 1]):
            problems.append(f"forward {n}: inputs of sampled rows are not the committed tokens at {start}")
        fresh_model.truncate(start)
        out = fresh_model.forward_step_all_logits(f.tokens) if f.all_logits else fresh_model.forward_step(f.tokens)[None, :]
        for i, pos, row in f.sampled:
            rows += 1
            got = out[i if f.all_logits else 0]
            mism += not np.array_equal(got, row)
            picks.append((pos, row))
    for pos, row in sorted(picks, key=lambda p: p[0]):
        if pos >= len(committed) or int(sampler.sample(row, list(committed[:pos]))) != committed[pos]:
            wrong += 1
    fresh_model.reset()
    return ReplayReport(len(rec.forwards), rows, mism, wrong, tuple(problems))
