"""Every exception fucina raises on purpose derives from :class:`FucinaError`."""

from __future__ import annotations


class FucinaError(Exception):
    """Base class of fucina's named errors.

    ``param`` names the argument or request field at fault when there is one (the server puts it
    in the OpenAI error envelope), else None.
    """

    def __init__(self, *args: object, param: str | None = None) -> None:
        super().__init__(*args)
        self.param = param


class InvalidOption(FucinaError, ValueError):
    """An option value is out of its valid range (raised at construction)."""


class ModelNotFound(FucinaError):
    """A model name or path could not be resolved to a GGUF file."""


class ModelDownloadError(FucinaError):
    """``fucina pull`` could not fetch a part of a model (network, index, missing file); the parts already
    assembled are kept, so the next pull resumes."""


class ModelIntegrityError(FucinaError):
    """A downloaded or assembled model file has a wrong byte (size or sha256 against the catalog); the
    message names the file, and nothing of it is left in the cache."""


class ModelLoadError(FucinaError):
    """llama.cpp refused to load a model or create its context."""


class ContextOverflow(FucinaError):
    """A forward would put more tokens in the KV cache than the context holds."""


class DecodeError(FucinaError):
    """The engine failed to evaluate a batch; the KV cache was restored."""


class NotRewindable(FucinaError):
    """The model's state cannot be truncated (recurrent/hybrid), so it cannot speculate."""


class CostTableEmpty(InvalidOption):
    """A cost table with no measured points."""


class InvalidArgument(FucinaError, ValueError):
    """A call argument is malformed: wrong array shape, a negative count, k out of range."""


class TooManyReferences(FucinaError, ValueError):
    """A speculation index already holds its maximum number of reference documents."""


class EmptyReference(FucinaError, ValueError):
    """A reference document has no tokens, so it can never match anything."""


class InvalidToken(FucinaError, ValueError):
    """A token id is not an integer or lies outside the valid id range; nothing was changed."""


class SamFrozen(FucinaError):
    """A token was appended to a frozen SAM index (freeze() makes an index read-only for good)."""


class SamNotFrozen(FucinaError):
    """An external cursor was requested over a SAM index that can still grow (freeze() it first)."""


class SamIntegrityError(FucinaError):
    """A SAM index violates one of its structural invariants (check_integrity found it)."""


class InvalidGrammar(InvalidOption):
    """A grammar, JSON schema or regex that the constraint library rejects (``param`` names the field)."""


class GrammarViolation(FucinaError):
    """A constrained generation reached a state its grammar allows no token from (a library fault)."""


class ChatTemplateMissing(InvalidOption):
    """A chat needs a template: the model ships none and ChatOptions(template=...) was not given."""


class ChatTemplateMismatch(FucinaError):
    """The chat template re-rendered earlier turns differently, so new tokens cannot be appended."""


class StopSequencesNeedPlainDecoding(InvalidOption):
    """Text-level stop sequences were combined with speculation (see ChatOptions for why)."""


class SpeculationDisabled(FucinaError):
    """A speculation-only feature (e.g. reference documents) was used on a plain conversation."""


class ContextLengthExceeded(InvalidArgument):
    """The prompt plus the requested ``max_tokens`` cannot fit in the model's context.

    ``n_ctx`` is the context, ``prompt_tokens`` the prompt's length and ``max_tokens`` the tokens
    asked for (None: none were, and even one generated token does not fit).
    """

    def __init__(self, *args: object, param: str | None = None, n_ctx: int = 0, prompt_tokens: int = 0,
                 max_tokens: int | None = None) -> None:
        super().__init__(*args, param=param)
        self.n_ctx = n_ctx
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens


class ConversationDesync(FucinaError):
    """The model's KV cache no longer matches the conversation (someone else used the model)."""


class EngineUnavailable(FucinaError):
    """The llama.cpp engine build that was asked for (``FUCINA_ENGINE``) is not there."""
