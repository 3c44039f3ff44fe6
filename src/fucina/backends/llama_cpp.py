"""The llama.cpp backend over llama-cpp-python's low-level API.

One reusable ``llama_batch``; logits requested per row; ``llama_memory_seq_rm`` rewinds the cache;
logits are read as a zero-copy numpy view of the context's output buffer (valid until the next
forward). Every error path leaves the KV cache at the length it had before the failed call.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from fucina import cpu
from fucina.context_size import ContextChoice, KvLayout, choose_context, mem_available_bytes, requested_context
from fucina.engine_selection import activate, exact_by_default, require_selected
from fucina.errors import ContextOverflow, DecodeError, InvalidOption, ModelLoadError, NotRewindable

activate()  # the patched (batch-invariant) engine when it is built, unless FUCINA_ENGINE says otherwise
try:
    import llama_cpp as _ll
    from llama_cpp import _logger as _ll_logger
except ImportError as exc:  # pragma: no cover - the package is a hard dependency
    raise ImportError("fucina's llama.cpp backend needs llama-cpp-python: pip install fucina") from exc

_init_lock = threading.Lock()
_backend_ready = False


@_ll.llama_log_callback
def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp's load chatter would bury the one-line stats; errors surface as exceptions.
    return None


def _ensure_backend(verbose: bool) -> None:
    global _backend_ready
    _ll_logger.set_verbose(verbose)
    if verbose:
        _ll.llama_log_set(_ll_logger.llama_log_callback, ctypes.c_void_p(0))
    else:
        _ll.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    with _init_lock:
        if not _backend_ready:
            _ll.llama_backend_init()
            _backend_ready = True


def default_threads() -> int:
    """Threads default to the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class LlamaOptions:
    """How a GGUF model is loaded.

    ``use_extra_bufts=False`` and ``flash_attn=False`` are part of the batch-invariant (exact) mode:
    CPU weight repacking takes a different kernel for batches >= 4, so batched verify rows would
    differ from single-step rows. ``use_extra_bufts=None`` (the default) is resolved by
    :func:`fucina.cpu.default_extra_bufts`: off on the patched engine (:mod:`fucina.engine_selection`)
    and on a CPU with AMX (llama.cpp's AMX buffer type crashes), on otherwise. ``True`` or ``False``
    is an explicit choice and is kept as given.

    ``n_ctx=None`` (the default) is chosen at load by :func:`fucina.context_size.choose_context`: the
    model's trained context, capped by what this machine's memory holds (``reserve_bytes`` is what the
    caller keeps beside the KV cache, e.g. prefix snapshots); the model's ``context_choice`` says why.
    """

    n_ctx: int | None = None
    #: Tokens per llama_decode call; None = min(512, n_ctx) (a batch never exceeds the context).
    n_batch: int | None = None
    n_threads: int | None = None
    use_extra_bufts: bool | None = None
    flash_attn: bool = False
    #: Full-size sliding-window cache (Gemma 3): rewinds need the rows a pruned SWA cache drops.
    swa_full: bool = True
    verbose: bool = False
    #: Bytes the caller holds beside the KV cache, left free when ``n_ctx`` is chosen (None).
    reserve_bytes: int = 0

    def __post_init__(self) -> None:
        if self.use_extra_bufts is None:
            object.__setattr__(self, "use_extra_bufts", cpu.default_extra_bufts(exact_engine=exact_by_default()))
        if self.n_ctx is not None:
            if isinstance(self.n_ctx, bool) or not isinstance(self.n_ctx, int) or self.n_ctx < 16:
                raise InvalidOption(f"n_ctx must be a whole number >= 16 or None, got {self.n_ctx!r}", param="n_ctx")
            if self.n_batch is None:
                object.__setattr__(self, "n_batch", min(512, self.n_ctx))
            if not 1 <= self.n_batch <= self.n_ctx:
                raise InvalidOption(f"n_batch must be in [1, n_ctx={self.n_ctx}], got {self.n_batch}", param="n_batch")
        elif self.n_batch is not None and self.n_batch < 1:
            raise InvalidOption(f"n_batch must be >= 1, got {self.n_batch}", param="n_batch")
        if isinstance(self.reserve_bytes, bool) or not isinstance(self.reserve_bytes, int) or self.reserve_bytes < 0:
            raise InvalidOption(f"reserve_bytes must be a whole number >= 0, got {self.reserve_bytes!r}",
                                param="reserve_bytes")
        if self.n_threads is not None and self.n_threads < 1:
            raise InvalidOption(f"n_threads must be >= 1, got {self.n_threads}")


class LlamaVocab:
    """Tokenizer side of a GGUF model; can be loaded without weights (``vocab_only``)."""

    def __init__(self, path: str | os.PathLike[str], *, vocab_only: bool = True, verbose: bool = False,
                 _model_params=None) -> None:
        self.path = Path(path)
        require_selected()
        if not self.path.is_file():
            raise ModelLoadError(f"no GGUF file at {self.path}")
        _ensure_backend(verbose)
        params = _model_params if _model_params is not None else _ll.llama_model_default_params()
        params.vocab_only = vocab_only
        self._model = _ll.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load {self.path} (not a GGUF it supports?)")
        self._vocab = _ll.llama_model_get_vocab(self._model)
        self.vocab_size: int = _ll.llama_vocab_n_tokens(self._vocab)
        self.add_bos_default: bool = bool(_ll.llama_vocab_get_add_bos(self._vocab))
        self.bos_id: int = int(_ll.llama_vocab_bos(self._vocab))
        self.eos_ids = frozenset(self._scan_eog())
        self._pieces: dict[int, bytes] = {}
        self._tok_buf = (_ll.llama_token * 4096)()
        self._piece_buf = ctypes.create_string_buffer(256)

    def _scan_eog(self) -> list[int]:
        # llama.cpp's end-of-generation set (EOS, EOT, <end_of_turn>, ...); one pass at load.
        is_eog = _ll.llama_vocab_is_eog
        return [t for t in range(self.vocab_size) if is_eog(self._vocab, t)]

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text`` exactly as llama.cpp's tokenizer produces them."""
        data = text.encode("utf-8")
        buf = self._tok_buf
        n = _ll.llama_tokenize(self._vocab, data, len(data), buf, len(buf), add_bos, special)
        if n < 0:
            buf = (_ll.llama_token * (-n))()
            n = _ll.llama_tokenize(self._vocab, data, len(data), buf, len(buf), add_bos, special)
            if n < 0:  # pragma: no cover - llama.cpp reported a size it then refused
                raise DecodeError(f"tokenization of {len(data)} bytes failed")
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """Raw bytes of one token (control tokens render empty)."""
        piece = self._pieces.get(token)
        if piece is None:
            n = _ll.llama_token_to_piece(self._vocab, token, self._piece_buf, 256, 0, False)
            if n < 0:  # pragma: no cover - pieces longer than 256 bytes
                buf = ctypes.create_string_buffer(-n)
                n = _ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
                piece = buf.raw[:n]
            else:
                piece = self._piece_buf.raw[:n]
            self._pieces[token] = piece
        return piece

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    @property
    def eos_id(self) -> int:
        """The vocabulary's EOS token (one of :attr:`eos_ids`)."""
        return int(_ll.llama_vocab_eos(self._vocab))

    def special_text(self, token: int) -> str:
        """The text of a token with control tokens spelled out (``<|im_end|>``), for chat templates."""
        buf = ctypes.create_string_buffer(256)
        n = _ll.llama_token_to_piece(self._vocab, token, buf, 256, 0, True)
        return buf.raw[:max(n, 0)].decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        """The template string stored in the GGUF, or None when the model has none."""
        raw = _ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", "replace") if raw else None

    def apply_chat_template(self, messages: Sequence[dict[str, str]], add_assistant: bool = True,
                            template: str | None = None) -> str:
        """Render ``messages`` with llama.cpp's built-in template engine.

        Raises :class:`InvalidOption` when the model has no template and none is given.
        """
        tmpl = template if template is not None else self.chat_template()
        if tmpl is None:
            raise InvalidOption(
                f"{self.path.name} has no chat template; pass an explicit template or use a raw prompt"
            )
        arr = (_ll.llama_chat_message * len(messages))()
        keep = []
        for i, m in enumerate(messages):
            role, content = m["role"].encode(), m["content"].encode()
            keep += [role, content]
            arr[i].role, arr[i].content = role, content
        size = 4096 + 2 * sum(len(k) for k in keep)
        buf = ctypes.create_string_buffer(size)
        n = _ll.llama_chat_apply_template(tmpl.encode(), arr, len(messages), add_assistant, buf, size)
        if n < 0:
            raise InvalidOption(f"llama.cpp does not support the chat template of {self.path.name}")
        if n > size:
            buf = ctypes.create_string_buffer(n)
            n = _ll.llama_chat_apply_template(tmpl.encode(), arr, len(messages), add_assistant, buf, n)
        return buf.raw[:n].decode("utf-8", "replace")

    def metadata(self, key: str) -> str | None:
        """The GGUF metadata value of ``key`` as text (e.g. ``general.architecture``), None when absent."""
        buf = ctypes.create_string_buffer(256)
        n = _ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            _ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def kv_layout(self) -> KvLayout:
        """The KV cache's shape per token (layers, K and V widths, heads; f16), from the model's metadata."""
        arch = self.metadata("general.architecture") or ""
        n_embd = int(_ll.llama_model_n_embd(self._model))
        n_head = int(_ll.llama_model_n_head(self._model))
        n_head_kv = int(_ll.llama_model_n_head_kv(self._model))
        head = n_embd // n_head if n_head else 0
        key_length = _int_or(self.metadata(f"{arch}.attention.key_length"), head)
        value_length = _int_or(self.metadata(f"{arch}.attention.value_length"), head)
        return KvLayout(n_layer=int(_ll.llama_model_n_layer(self._model)), n_embd_k_gqa=key_length * n_head_kv,
                        n_embd_v_gqa=value_length * n_head_kv, n_head=n_head)

    def close(self) -> None:
        if getattr(self, "_model", None):
            _ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass


class LlamaModel(LlamaVocab):
    """A GGUF model with a context; implements :class:`fucina.model.Model`."""

    def __init__(self, path: str | os.PathLike[str], options: LlamaOptions | None = None) -> None:
        self.options = opts = options or LlamaOptions()
        mparams = _ll.llama_model_default_params()
        mparams.use_extra_bufts = opts.use_extra_bufts
        super().__init__(path, vocab_only=False, verbose=opts.verbose, _model_params=mparams)
        self.rewindable = not (_ll.llama_model_is_recurrent(self._model) or _ll.llama_model_is_hybrid(self._model))
        #: The context the model was trained on (GGUF ``<arch>.context_length``).
        self.n_ctx_train: int = _ll.llama_model_n_ctx_train(self._model)
        #: The context this model runs with and why (:class:`fucina.context_size.ContextChoice`).
        try:
            self.context_choice: ContextChoice = self._choose_context(opts)
            self.options = opts = replace(opts, n_ctx=self.context_choice.n_ctx)
        except BaseException:
            self.close()
            raise
        self.n_threads = opts.n_threads or default_threads()
        cparams = _ll.llama_context_default_params()
        cparams.n_ctx = opts.n_ctx
        cparams.n_batch = cparams.n_ubatch = opts.n_batch
        cparams.n_threads = cparams.n_threads_batch = self.n_threads
        cparams.flash_attn_type = (
            _ll.LLAMA_FLASH_ATTN_TYPE_ENABLED if opts.flash_attn else _ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cparams.no_perf = True
        # Sliding-window models (Gemma 3) prune the SWA cache past the window; a full-size SWA cache
        # keeps the rows a rewind needs.
        cparams.swa_full = opts.swa_full
        self._ctx = _ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise ModelLoadError(f"llama.cpp could not create a context for {self.path} (n_ctx={opts.n_ctx})")
        self.context_length: int = _ll.llama_n_ctx(self._ctx)
        self._mem = _ll.llama_get_memory(self._ctx)
        self._batch = _ll.llama_batch_init(opts.n_batch, 0, 1)
        self._n = 0

    def _choose_context(self, opts: LlamaOptions) -> ContextChoice:
        try:
            layout: KvLayout | None = self.kv_layout()
        except (InvalidOption, ValueError):  # pragma: no cover - metadata llama.cpp itself loaded
            layout = None
        n_batch = opts.n_batch or 512
        if opts.n_ctx is not None:
            return requested_context(opts.n_ctx, trained=self.n_ctx_train, layout=layout, n_batch=min(n_batch, opts.n_ctx))
        # llama.cpp's compute buffer also holds a whole batch's logits rows (f32), whatever the context.
        logits = self.vocab_size * n_batch * 4
        return choose_context(trained=self.n_ctx_train, layout=layout, mem_available=mem_available_bytes(),
                              weights_bytes=self.path.stat().st_size, reserve_bytes=opts.reserve_bytes, fixed_bytes=logits,
                              n_batch=n_batch)

    # -- cache -------------------------------------------------------------------------------
    @property
    def kv_len(self) -> int:
        return self._n

    def truncate(self, n: int) -> None:
        if n < 0:
            raise InvalidOption(f"truncate length must be >= 0, got {n}")
        if n >= self._n:
            return
        if not self.rewindable:
            raise NotRewindable(f"{self.path.name} is recurrent/hybrid: its state cannot be rewound")
        if not _ll.llama_memory_seq_rm(self._mem, 0, n, -1):
            raise DecodeError(f"llama.cpp refused to truncate the cache to {n}")
        self._n = n

    def reset(self) -> None:
        _ll.llama_memory_clear(self._mem, True)
        self._n = 0

    def snapshot(self) -> np.ndarray:
        """A copy of the KV cache (sequence 0: cell positions, K and V) as a byte array.

        :meth:`restore` makes the cache hold exactly these rows again, bit for bit. It is one copy of
        the cache rows: for 1k tokens of SmolLM2-135M 22 MiB and ~3 ms to save or restore on a 2-core
        CPU (Gemma 3 270M: 10 MiB, ~2 ms), against seconds to evaluate them again.
        """
        size = _ll.llama_state_seq_get_size(self._ctx, 0)
        buf = np.empty(size, dtype=np.uint8)
        n = _ll.llama_state_seq_get_data(self._ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
        if n != size:
            raise DecodeError(f"llama.cpp wrote {n} of the {size} bytes of a cache snapshot")
        return buf

    def snapshot_nbytes(self) -> int:
        """The bytes a :meth:`snapshot` taken now would hold, without taking it."""
        return int(_ll.llama_state_seq_get_size(self._ctx, 0))

    def restore(self, snapshot: np.ndarray) -> None:
        """Replace the cache with a :meth:`snapshot` of this model (the snapshot stays usable).

        On failure the cache is emptied and :class:`DecodeError` raised.
        """
        buf = np.ascontiguousarray(snapshot, dtype=np.uint8)
        _ll.llama_memory_seq_rm(self._mem, 0, -1, -1)
        n = _ll.llama_state_seq_set_data(self._ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                         buf.nbytes, 0)
        if n != buf.nbytes:
            self.reset()
            raise DecodeError("llama.cpp refused to restore a cache snapshot (taken from another model?)")
        self._n = int(_ll.llama_memory_seq_pos_max(self._mem, 0)) + 1

    # -- forward -----------------------------------------------------------------------------
    def forward_step(self, tokens: Sequence[int]) -> np.ndarray:
        return self._forward(tokens, all_logits=False)[-1]

    def forward_step_all_logits(self, tokens: Sequence[int]) -> np.ndarray:
        return self._forward(tokens, all_logits=True)

    def _forward(self, tokens: Sequence[int], all_logits: bool) -> np.ndarray:
        k = len(tokens)
        if k == 0:
            raise InvalidOption("forward needs at least one token")
        if self._n + k > self.context_length:
            raise ContextOverflow(
                f"{self._n} cached + {k} new tokens exceed the context of {self.context_length}"
            )
        if all_logits and k > self.options.n_batch:
            raise InvalidOption(f"all-logits forward of {k} tokens exceeds n_batch={self.options.n_batch}")
        vocab = self.vocab_size
        start = self._n
        try:
            # Long prompts go in n_batch chunks; only the final chunk's last row (or every row) is output.
            for c0 in range(0, k, self.options.n_batch):
                chunk = tokens[c0 : c0 + self.options.n_batch]
                last_chunk = c0 + len(chunk) == k
                self._fill_batch(chunk, self._n, all_logits, last_chunk)
                rc = _ll.llama_decode(self._ctx, self._batch)
                if rc != 0:
                    raise DecodeError(f"llama_decode failed with code {rc} at position {self._n}")
                self._n += len(chunk)
        except BaseException:
            # Whatever failed (engine, bad id, KeyboardInterrupt), the cache goes back to where it was.
            _ll.llama_memory_seq_rm(self._mem, 0, start, -1)
            self._n = start
            raise
        rows = len(chunk) if all_logits else 1
        ptr = _ll.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(rows, vocab))

    def _fill_batch(self, chunk: Sequence[int], pos0: int, all_logits: bool, last_chunk: bool) -> None:
        b = self._batch
        n = len(chunk)
        vocab = self.vocab_size
        for i, t in enumerate(chunk):
            t = int(t)
            if not 0 <= t < vocab:
                raise InvalidOption(f"token id {t} outside the vocabulary [0, {vocab})")
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits and last_chunk
        if last_chunk:
            b.logits[n - 1] = True
        b.n_tokens = n

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            _ll.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            _ll.llama_free(self._ctx)
            self._ctx = None
        super().close()


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def system_info() -> str:
    """llama.cpp's build/CPU feature line."""
    return _ll.llama_print_system_info().decode("utf-8", "replace").strip()
