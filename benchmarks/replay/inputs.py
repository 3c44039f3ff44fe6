"""What the replay walks: a :class:`Stream` (a prompt and the continuation replayed after it), and the
readers of each workload's streams, keyed by workload name in the order they are read.

* :func:`read_token_file`: whitespace-separated token ids (the whole file is the continuation);
* :func:`bench_streams`: Spec-Bench dev rows (``spec_bench_dev.jsonl``), ``bench:<group>``;
* :func:`trace_streams`: recorded agent requests, ``trace:<source>``, each carrying its trajectory's
  earlier requests;
* :func:`read_recorded` / :func:`recorded_streams`: a model's plain outputs recorded by
  ``python -m benchmarks.streams``, ``stream:<group>``;
* :func:`synthetic_edit_streams`: a document and its lightly edited copy, ``copy-edit`` and ``ref-edit``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol, TypeVar

import numpy as np

__all__ = ["BENCH_FILE", "TRACE_CONTEXT_TOKENS", "Stream", "Tokenize", "Tokenizer", "read_token_file",
           "bench_streams", "trace_streams", "recorded_streams", "read_recorded", "read_jsonl",
           "synthetic_edit_streams"]

BENCH_FILE = "spec_bench_dev.jsonl"
#: Context tokens a trace request keeps (its last ones), as the issue's measurement did.
TRACE_CONTEXT_TOKENS = 6000

Row = TypeVar("Row")


@dataclass
class Stream:
    """One conversation to replay."""

    prompt: list[int]
    continuation: list[int]
    references: list[list[int]] = field(default_factory=list)
    #: Earlier requests of the same tenant (each prompt + output), oldest first: the cross-request source.
    earlier: list[list[int]] = field(default_factory=list)
    #: The continuation was sampled (T > 0), so the policy prices it as a sampled generation.
    sampled: bool = False
    #: The task id of a recorded stream ("" when the workload has none), for ``--per-task``.
    name: str = ""


class Tokenize(Protocol):
    """A tokenizer's text -> ids, as the Spec-Bench and trace readers call it."""

    def __call__(self, text: str, add_bos: bool = True) -> list[int]: ...


class Tokenizer(Protocol):
    """What the replay needs of a model's tokenizer: its vocabulary, its ids and their bytes (the
    word pieces the policy prices)."""

    vocab_size: int

    def tokenize(self, text: str, add_bos: bool = True) -> list[int]: ...

    def token_bytes(self, token: int) -> bytes: ...


def read_token_file(path: Path) -> list[int]:
    """Whitespace-separated token ids."""
    return [int(t) for t in path.read_text(encoding="utf-8").split()]


def _strings(value: object) -> Iterable[str]:
    # Spec-Bench fields are a string, a list of strings, or (rag) a list of lists of strings.
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def bench_streams(bench_dir: Path, tokenize: Tokenize, limit: int | None,
                  ) -> tuple[dict[str, list[Stream]], int]:
    """Spec-Bench rows grouped by ``group``; returns the workloads and the rows skipped (those
    without a reference answer). The joined ``turns`` are the prompt, the ``reference`` the
    continuation; ``limit`` caps the rows per group."""
    workloads: dict[str, list[Stream]] = defaultdict(list)
    skipped = 0
    with open(bench_dir / BENCH_FILE, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            answer = "\n".join(_strings(row.get("reference")))
            group = f"bench:{row.get('group', 'unknown')}"
            if not answer.strip():
                skipped += 1
                continue
            if limit is not None and len(workloads[group]) >= limit:
                continue
            prompt = "\n\n".join(_strings(row.get("turns")))
            workloads[group].append(Stream(prompt=tokenize(prompt, add_bos=True),
                                           continuation=tokenize(answer, add_bos=False)))
    return dict(workloads), skipped


def trace_streams(path: Path, tokenize: Tokenize, context_tokens: int = TRACE_CONTEXT_TOKENS,
                  ) -> dict[str, list[Stream]]:
    """Agent trace requests grouped by ``source`` (``trace:aider``, ...), in trajectory order.

    Each stream's ``earlier`` holds its trajectory's previous requests (context + output, the
    context cut like the prompt), for the cross-request source set.
    """
    rows = read_jsonl(path, "trace row", lambda row: (str(row["source"]), str(row["trajectory"]),
                                                      int(row["step"]), str(row["context"]), str(row["output"])))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    workloads: dict[str, list[Stream]] = defaultdict(list)
    history: dict[tuple[str, str], list[list[int]]] = defaultdict(list)
    for source, trajectory, _, context, output in rows:
        prompt = tokenize(context, add_bos=True)[-context_tokens:]
        answer = tokenize(output, add_bos=False)
        if not answer:
            continue
        earlier = history[(source, trajectory)]
        workloads[f"trace:{source}"].append(Stream(prompt=prompt, continuation=answer, earlier=list(earlier)))
        earlier.append(prompt + answer)
    return dict(workloads)


def recorded_streams(path: Path) -> dict[str, list[Stream]]:
    """Streams recorded by ``python -m benchmarks.streams``, grouped as ``stream:<group>``."""
    return read_recorded(path)[0]


def _ids(values: Iterable[int]) -> list[int]:
    """A JSON list of token ids as ints (``int`` also rejects a non-number with ValueError/TypeError)."""
    return [int(t) for t in values]


def read_recorded(path: Path) -> tuple[dict[str, list[Stream]], str | None]:
    """A stream file in one pass: its streams (as :func:`recorded_streams`) and the model that wrote
    them (its lines' ``model``; None for a file from before the field). ValueError if its lines
    name different models."""
    def parse(row: dict) -> tuple[str, Stream, object]:
        return (str(row["group"]), Stream(prompt=_ids(row["prompt"]), continuation=_ids(row["output"]),
                                          references=[_ids(r) for r in row.get("references", [])],
                                          sampled=float(row.get("temperature", 0.0)) > 0,
                                          name=str(row.get("id", ""))),
                row.get("model"))

    workloads: dict[str, list[Stream]] = defaultdict(list)
    models = set()
    for group, stream, model in read_jsonl(path, "recorded stream", parse):
        if model is not None:
            models.add(str(model))
        if stream.continuation:
            workloads[f"stream:{group}"].append(stream)
    if len(models) > 1:
        raise ValueError(f"{path}: streams from several models ({', '.join(sorted(models))}); "
                         "record one file per model")
    return dict(workloads), (models.pop() if models else None)


def read_jsonl(path: Path, what: str, parse: Callable[[dict], Row]) -> list[Row]:
    """``parse(row)`` of every non-empty line of a JSONL file; a bad line raises ValueError naming
    ``path:line`` and ``what`` it should have been."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(parse(json.loads(line)))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a {what} ({exc})") from exc
    return out


def synthetic_edit_streams(seed: int = 0, n_tokens: int = 2000, vocab: int = 32000,
                           ) -> dict[str, list[Stream]]:
    """A document and its lightly edited copy, as "copy-edit" (the document in the prompt) and
    "ref-edit" (the document injected as a reference) workloads."""
    rng = np.random.default_rng(seed)
    # Zipf-like ids so frequent tokens recur, as in text; capped into the vocabulary.
    doc = [int(t) for t in np.minimum(rng.zipf(1.3, n_tokens), vocab - 1)]
    edited: list[int] = []
    pos = 0
    while pos < len(doc):
        run = int(rng.integers(40, 160))
        edited.extend(doc[pos: pos + run])
        pos += run
        kind = rng.integers(3)
        span = int(rng.integers(1, 6))
        new = [int(t) for t in rng.integers(0, vocab, span)]
        if kind == 0:  # replace
            edited.extend(new)
            pos += span
        elif kind == 1:  # insert
            edited.extend(new)
        else:  # delete
            pos += span
    return {
        "copy-edit": [Stream(prompt=doc, continuation=edited)],
        "ref-edit": [Stream(prompt=[], continuation=edited, references=[doc])],
    }
