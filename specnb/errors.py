"""specnb's exceptions: every problem a user can cause gets one of these, with a message
that names the problem and the offending value (never a NumPy traceback from deep inside)."""


class SpecnbError(Exception):
    """Base class of every error specnb raises on purpose."""


class GGUFError(SpecnbError):
    """The file is missing, is not GGUF, is truncated or claims impossible sizes."""


class UnsupportedError(SpecnbError):
    """A valid GGUF that uses an architecture or tensor type specnb does not implement."""


class ParamError(SpecnbError, ValueError):
    """An invalid parameter value (sampler, context size, sequence id, draft settings...).
    `field`: the dataclass field it is about, where there is one (the flag table names the flag
    that set it)."""

    def __init__(self, message: str = "", field: str | None = None):
        super().__init__(message)
        self.field = field


class ContextFullError(SpecnbError):
    """A prompt or batch does not fit in the context (n_ctx)."""


class BatchError(SpecnbError, ValueError):
    """A batch that the context cannot decode (positions not contiguous, bad sequence id...)."""


class VocabError(SpecnbError):
    """A tokenizer table that cannot be used, or an incompatible draft/target vocab pair."""


class ModelNotFoundError(SpecnbError):
    """The default model is not installed or its checksum does not match."""


def check_param(ok: bool, name: str, value, expected: str, field: str | None = None) -> None:
    """Raise ParamError('invalid name=value: expected ...', field=field or name) unless ok."""
    if not ok:
        raise ParamError(f"invalid {name}={value!r}: expected {expected}", field=field or name)
