"""specnb: small-draft-model speculative decoding as llama.cpp does it, in readable Python."""
from .errors import (SpecnbError, GGUFError, UnsupportedError, ParamError, ContextFullError,
                     BatchError, VocabError, ModelNotFoundError)

__version__ = "0.1.0"
