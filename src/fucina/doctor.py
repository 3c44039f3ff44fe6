"""``fucina doctor``: which level of losslessness holds on this engine, and how to get *exact*.

Two honest levels:
* **exact** — batched verify rows are bitwise the rows plain decoding computes one token at a time,
  so speculative output is bit-identical to plain decoding (greedy and sampled).
* **distribution** — every committed token is still the sampler's pick on the logits the engine
  computed for its position (the target distribution), but the engine's batched kernels round
  differently from its single-row ones, so a near-tie can flip and the streams can diverge.

The check is cheap (a few dozen forwards) and cached per (model file, engine build, machine).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from fucina.speculative.policy import DEFAULT_MAX_DRAFT

#: The one command that builds the patched, batch-invariant engine (fucina then uses it by default).
EXACT_INSTALL = "python -m fucina.engine build"
_PROMPT = "In the beginning the archive held only letters, maps and a few photographs of the harbour."


@dataclass(frozen=True)
class InvarianceReport:
    """Facts from the batch-invariance self-check (the level depends on the draft cap in use)."""

    ks: tuple[int, ...]
    rows: int
    mismatched_rows: int
    argmax_flips: int
    max_abs_diff: float
    #: Largest batch size n such that every tested batch <= n was bitwise equal (0: none).
    max_exact_rows: int = 0

    @property
    def level(self) -> str:
        """The level for default-length drafts (no cap)."""
        return level_for(self, DEFAULT_MAX_DRAFT)

    def describe(self, max_draft: int = DEFAULT_MAX_DRAFT) -> str:
        lvl = level_for(self, max_draft)
        cap = f" (drafts capped at {max_draft})" if lvl == "exact" and max_draft < DEFAULT_MAX_DRAFT else ""
        return (
            f"level: {lvl}{cap}  ({self.rows} rows over batch sizes {list(self.ks)}: "
            f"{self.mismatched_rows} not bitwise equal, {self.argmax_flips} argmax flips, "
            f"max |dlogit| = {self.max_abs_diff:.4g}; bitwise up to {self.max_exact_rows} rows)"
        )

    def __str__(self) -> str:
        return self.describe()


def level_for(report: InvarianceReport, max_draft: int) -> str:
    """"exact" when every verify the decoder can issue (<= max_draft + 1 rows) is bitwise."""
    return "exact" if max_draft + 1 <= report.max_exact_rows else "distribution"


#: Batch sizes probed: every small size (kernels switch paths at small thresholds), then a few large.
DEFAULT_KS = (2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 49, 64)
#: Fewest verify rows worth speculating with (carried token + min_draft of 2).
MIN_USEFUL_ROWS = 3


def check_batch_invariance(model, ks: Sequence[int] = DEFAULT_KS, prompt: Sequence[int] | None = None) -> InvarianceReport:
    """Compare rows of k-token forwards with the same positions computed one token at a time."""
    prompt = list(prompt) if prompt is not None else model.tokenize(_PROMPT)
    # A small context (a test model, a tiny n_ctx) still gets a check: half of it for the prompt, and
    # the batch sizes that fit after it.
    room = int(getattr(model, "context_length", 1 << 30))
    prompt = prompt[: max(1, room // 2)]
    ks = [k for k in ks if len(prompt) + k <= room] or [min(ks)]
    kmax = max(ks)
    cont = [int(t) for t in model.tokenize(" The letters were sorted by year and by sender, then", add_bos=False)]
    cont = (cont * (1 + kmax // max(1, len(cont))))[:kmax]
    model.reset()
    model.forward_step(prompt)
    base = model.kv_len
    single = []
    for t in cont:
        single.append(np.array(model.forward_step([t]), copy=True))
    mism = flips = rows = 0
    worst = 0.0
    bad_ks = []
    for k in sorted(ks):
        model.truncate(base)
        batch = np.array(model.forward_step_all_logits(cont[:k]), copy=True)
        k_bad = 0
        for i in range(k):
            rows += 1
            d = float(np.max(np.abs(batch[i] - single[i])))
            worst = max(worst, d)
            k_bad += d != 0.0
            flips += int(np.argmax(batch[i])) != int(np.argmax(single[i]))
        mism += k_bad
        if k_bad:
            bad_ks.append(k)
    model.reset()
    ok = [k for k in sorted(ks) if not bad_ks or k < min(bad_ks)]
    max_rows = max(ok) if ok else 0
    return InvarianceReport(tuple(sorted(ks)), rows, mism, flips, worst, max_rows)


def _level_cache(model) -> Path:
    from fucina.calibrate import cache_dir, machine_key

    return cache_dir() / "levels" / f"{machine_key(model)}.json"


def cached_report(model) -> InvarianceReport:
    """The check for this (model, engine build, machine, load options), run once and cached."""
    path = _level_cache(model)
    try:
        data = json.loads(path.read_text())
        data["ks"] = tuple(data["ks"])
        if data["ks"] == DEFAULT_KS:  # a check of other batch sizes (an older release's) is redone
            return InvarianceReport(**data)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    report = check_batch_invariance(model)
    save_report(model, report)
    return report


def save_report(model, report: InvarianceReport) -> None:
    path = _level_cache(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(report)))


def exact_draft_cap(report: InvarianceReport) -> int | None:
    """Longest draft keeping every verify bitwise, when a cap is needed and still worth speculating."""
    if report.max_exact_rows >= DEFAULT_MAX_DRAFT + 1 or report.max_exact_rows < MIN_USEFUL_ROWS:
        return None
    return report.max_exact_rows - 1


def engine_info() -> dict[str, str]:
    """Installed engine, build flags llama.cpp reports, CPU and threads."""
    import llama_cpp

    from fucina import cpu
    from fucina.engine_selection import active_engine
    from fucina.backends.llama_cpp import default_threads, system_info

    info = system_info()
    flags = {kv.split("=")[0].strip(): kv.split("=")[1].strip() for kv in info.replace("CPU :", "").split("|") if "=" in kv}
    engine = active_engine().describe()
    if cpu.cpu_has_amx():
        engine += f"; {cpu.AMX_REASON}: models load without extra buffer types unless --repack"
    return {
        "engine": engine,
        "llama-cpp-python": f"{llama_cpp.__version__} ({Path(llama_cpp.__file__).parent})",
        "llamafile sgemm": "on" if flags.get("LLAMAFILE") == "1" else "off",
        "cpu repack": "on" if flags.get("REPACK") == "1" else "off",
        "system info": info,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "threads": str(default_threads()),
        "cores": str(os.cpu_count()),
    }


def effective_max_draft(report: InvarianceReport, exact_mode: bool) -> int:
    """The draft cap `--spec` uses: capped in --exact mode when the engine needs it, else the default."""
    cap = exact_draft_cap(report) if exact_mode else None
    return cap if cap is not None else DEFAULT_MAX_DRAFT


#: The doctor's word on a CPU with AMX.
AMX_ADVICE = ("this CPU has AMX: fucina loads models without extra buffer types by default, because llama.cpp's "
              "AMX buffer type segfaults in batched matmuls (llama.cpp #20824), and the patched engine is built "
              "without llama.cpp's AMX kernels (its K-quant verifies and prefill use fucina's own AMX microtile, "
              "bitwise the other kernels' rows); --repack on a stock engine brings them, and the crash, back")


def advice(report: InvarianceReport, *, engine_variant: str, exact_load: bool, amx_cpu: bool = False) -> list[str]:
    """What the user should do to reach *exact*, given what was found (``engine_variant``: the
    :class:`~fucina.engine_selection.ActiveEngine` variant this process runs; ``amx_cpu``: the CPU
    has AMX, :func:`fucina.cpu.cpu_has_amx`)."""
    amx = [AMX_ADVICE] if amx_cpu else []
    if level_for(report, effective_max_draft(report, exact_load)) == "exact":
        tips = ["speculative output is bit-identical to plain decoding on this configuration"]
        if report.max_exact_rows < DEFAULT_MAX_DRAFT + 1:
            tips.append(f"(--exact caps drafts at {report.max_exact_rows - 1}: larger batches take another kernel path)")
        return tips + amx
    tips = ["speculative output follows the target distribution; batched rounding can flip near-ties"]
    if engine_variant != "patched":
        tips.append(f"to get exact: build the patched engine once (~10 min; fucina then uses it by default): {EXACT_INSTALL}")
    elif not exact_load:
        tips.append("load models with --exact (use_extra_bufts=False: no batch-size-dependent weight repacking)")
    return tips + amx
