"""Model-free replay benchmark of the speculation cascade: ``python -m benchmarks.replay``.

A workload's token streams are walked as if a model had generated them and every draft had been
verified against them (the tool's ``--help`` says how, and what each workload is). The package:

* :mod:`~benchmarks.replay.inputs`: :class:`Stream` and one reader per workload (token files,
  Spec-Bench rows, agent traces, recorded streams, synthetic edits);
* :mod:`~benchmarks.replay.simulate`: the walks (:func:`replay_stream`, the retrieval ceiling, the
  perfect policy, the priors);
* :mod:`~benchmarks.replay.tally`: what a walk adds up (:class:`WorkloadResult`, :class:`SourceTally`);
* :mod:`~benchmarks.replay.report`: the table, the JSON document and the per-task medians;
* :mod:`~benchmarks.replay.cli`: the command line (:func:`main`).
"""

from __future__ import annotations

from fucina.speculative.costs import CostTable

from benchmarks.replay.cli import DEFAULT_TOKENIZER, main
from benchmarks.replay.inputs import (BENCH_FILE, TRACE_CONTEXT_TOKENS, Stream, bench_streams, read_jsonl,
                                        read_recorded, read_token_file, recorded_streams, synthetic_edit_streams,
                                        trace_streams)
from benchmarks.replay.report import format_table, task_medians
from benchmarks.replay.simulate import (ceiling_steps, flat_table, match_only, measure_priors,
                                          perfect_policy_cost, replay_stream)
from benchmarks.replay.tally import NO_DRAFT, SourceTally, WorkloadResult

__all__ = ["Stream", "SourceTally", "WorkloadResult", "replay_stream", "synthetic_edit_streams",
           "trace_streams", "recorded_streams", "read_recorded", "flat_table", "ceiling_steps",
           "perfect_policy_cost", "match_only", "task_medians", "main",
           "BENCH_FILE", "TRACE_CONTEXT_TOKENS", "NO_DRAFT", "DEFAULT_TOKENIZER", "CostTable", "bench_streams",
           "read_jsonl", "read_token_file", "format_table", "measure_priors"]
