"""Same-shape replay: passes on correct runs (fake and real engine), fails on broken KV truncation."""

import pytest

from fucina.backends.fake import FakeModel
from fucina.plain import PlainDecoder
from benchmarks.shape_audit import RecordingModel, replay
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.costs import CostTable
from fucina.speculative.scripted import ScriptedSource

CHEAP = CostTable(((2, 1.0), (32, 1.0)), "test")
SAMPLED = SamplerOptions(temperature=0.8, top_k=20, repeat_penalty=1.2, seed=3)


def spec_run(model, fresh, prompt, opts, n, mode="partial", stream=None):
    plain = PlainDecoder(fresh, Sampler(opts))
    plain.feed(prompt)
    ref = list(plain.generate(n))
    fresh.reset()
    rec = RecordingModel(model)
    d = SpeculativeDecoder(rec, ScriptedSource(prompt + ref, model.vocab_size, mode, seed=1), Sampler(opts),
                           SpecOptions(verify_all=True), cost_table=CHEAP, row_hook=rec.row_hook)
    d.feed(prompt)
    out = list(d.generate(n))
    return rec, d, out


def test_replay_passes_on_a_correct_run_fake():
    m, f = FakeModel(seed=2), FakeModel(seed=2)
    prompt = m.tokenize("abcabcabd abcabc")
    rec, d, out = spec_run(m, f, prompt, SAMPLED, 80)
    r = replay(rec, FakeModel(seed=2), prompt + out, lambda: Sampler(SAMPLED))
    assert r.ok, r
    assert r.rows == len(out) and d.stats.verifies > 5


def test_replay_fails_when_truncation_is_broken(monkeypatch):
    m, f = FakeModel(seed=2), FakeModel(seed=2)
    prompt = m.tokenize("abcabcabd abcabc")
    real_truncate = FakeModel.truncate

    def leaky(self, n):  # keeps one rejected row whenever a verify rejected something
        real_truncate(self, min(n + 1, self.kv_len))

    monkeypatch.setattr(FakeModel, "truncate", leaky)
    rec, d, out = spec_run(m, f, prompt, SAMPLED, 60)
    monkeypatch.setattr(FakeModel, "truncate", real_truncate)
    r = replay(rec, FakeModel(seed=2), prompt + out, lambda: Sampler(SAMPLED))
    assert not r.ok


@pytest.mark.real_model
@pytest.mark.parametrize("opts", [SamplerOptions(), SAMPLED], ids=["greedy", "sampled"])
def test_replay_bitwise_on_real_engine(gemma, opts):
    """Works on the standard (non-batch-invariant) build: same shapes give bitwise-equal rows."""
    from fucina.catalog import load_model

    fresh = load_model("gemma3-270m", n_ctx=2048)
    gemma.reset()
    prompt = gemma.tokenize("Repeat after me: the quick brown fox jumps over the lazy dog. "
                            "the quick brown fox jumps over the lazy dog. the quick brown")
    rec, d, out = spec_run(gemma, fresh, prompt, opts, 48)
    r = replay(rec, fresh, prompt + out, lambda: Sampler(opts))
    gemma.reset()
    assert r.ok, r
    assert d.stats.verifies >= 3
