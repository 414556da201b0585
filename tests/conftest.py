"""Shared fixtures: the default model, tiny forged models (one per tensor type), contexts."""
import os

import pytest

# Keep specnb's cache (forged drafts, checksum verdicts) inside the test session unless CI or the
# user points it somewhere on purpose; the default draft is reused across runs when it exists.
os.environ.setdefault("SPECNB_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "specnb"))

from specnb import forge  # noqa: E402

TINY_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
              "Q5_K", "Q6_K"]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_path(tiny_dir):
    """Factory: path of a tiny random model of the given tensor type (cached per session)."""
    cache = {}

    def make(qtype="Q8_0", seed=0, arch="llama", n_layer=2, tied=True):
        key = (qtype, seed, arch, n_layer, tied)
        if key not in cache:
            k_type = qtype.endswith("_K")
            cache[key] = forge.tiny_model(
                tiny_dir / f"tiny-{arch}-{qtype}-{seed}-{n_layer}-{int(tied)}.gguf", qtype=qtype,
                n_layer=n_layer, n_embd=256 if k_type else 64, n_ff=512 if k_type else 128,
                n_head=4, n_head_kv=2, seed=seed, arch=arch, tied=tied)
        return cache[key]
    return make


@pytest.fixture(scope="session")
def tiny_model(tiny_path):
    from specnb.model import load_model
    return load_model(tiny_path("Q8_0"))


@pytest.fixture(scope="session")
def default_path():
    from specnb.models import default_target_path
    return default_target_path()


@pytest.fixture(scope="session")
def default_model(default_path):
    from specnb.model import load_model
    return load_model(default_path)


@pytest.fixture(scope="session")
def default_draft_model():
    from specnb.model import load_model
    from specnb.models import default_draft_path
    return load_model(default_draft_path())
