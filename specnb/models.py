"""The old name of specnb.registry (where models live) and specnb.cache (the cache folder):
kept so that existing notebooks and code importing `specnb.models` keep working."""
from .cache import cache_dir, sha256_file  # noqa: F401
from .errors import ModelNotFoundError  # noqa: F401
from .registry import default_draft_path, default_target_path  # noqa: F401
