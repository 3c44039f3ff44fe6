"""The fake backend: batch invariance (bitwise), truncate exactness, errors."""

import numpy as np
import pytest

from fucina.backends.fake import EOS_ID, FakeModel
from fucina.errors import ContextOverflow, DecodeError, InvalidOption, NotRewindable
from fucina.model_protocol import Model


def test_satisfies_model_protocol():
    assert isinstance(FakeModel(), Model)


def test_batched_rows_equal_single_steps_bitwise():
    toks = [256, 10, 20, 30, 10, 20, 40, 50, 60]
    batched = FakeModel(seed=3)
    rows = batched.forward_step_all_logits(toks)
    single = FakeModel(seed=3)
    for i, t in enumerate(toks):
        assert np.array_equal(single.forward_step([t]), rows[i]), f"row {i} differs"


def test_truncate_then_reappend_reproduces_logits():
    m = FakeModel(seed=1)
    m.forward_step([256, 1, 2, 3])
    a = m.forward_step_all_logits([4, 5, 6])
    m.truncate(4)
    b = m.forward_step_all_logits([4, 5, 6])
    assert np.array_equal(a, b) and m.kv_len == 7


def test_induction_makes_greedy_copy():
    # The row after a repeated bigram favours what followed it last time.
    m = FakeModel(seed=0)
    text = [256] + list(b"abcdefgh") + list(b"ab")
    row = m.forward_step(text)
    assert int(np.argmax(row)) == ord("c")


def test_context_overflow_is_named_and_leaves_cache():
    m = FakeModel(context_length=4)
    m.forward_step([1, 2, 3])
    with pytest.raises(ContextOverflow):
        m.forward_step([4, 5])
    assert m.kv_len == 3


def test_errors():
    with pytest.raises(InvalidOption):
        FakeModel(vocab_size=10)
    m = FakeModel()
    with pytest.raises(InvalidOption):
        m.forward_step([m.vocab_size])
    m.before_forward = lambda toks: (_ for _ in ()).throw(RuntimeError("boom"))
    with pytest.raises(DecodeError):
        m.forward_step([1])
    assert m.kv_len == 0
    nr = FakeModel(rewindable=False)
    nr.forward_step([1, 2])
    with pytest.raises(NotRewindable):
        nr.truncate(1)


def test_text_roundtrip():
    m = FakeModel()
    ids = m.tokenize("héllo")
    assert ids[0] == 256 and m.detokenize(ids) == "héllo"
    assert m.token_bytes(EOS_ID) == b""
