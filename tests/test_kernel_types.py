"""Kernels compiled for the tensor types a model uses, and only those (kernels/qtypes.py TypeSel).

- a TypeSel names exactly the types it was made from, with the right groups;
- the forward pass's selection sends every type to the right product (int8 activations for the
  types with an int8 kernel in q8 mode, float32 for the rest);
- in a fresh process with an empty Numba cache, decoding a Q4_0 model (Q8_0 embedding) in q8
  mode compiles the int8 Q4_0 and Q8_0 kernels and neither another type's kernel nor the
  float32 product, and its logits
  are bit-identical to the all-types pass the rest of the suite runs;
- a target and its draft share one selection; a bad SPECNB_KERNEL_TYPES is refused by name.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from specnb import ParamError
from specnb.run.backend_cpu import model_qtypes
from specnb.run.context import Batch, Context
from specnb.kernels import qtypes as T
from specnb.kernels.forward import fused_types
from specnb.model import load_model



def sel_types(sel) -> frozenset:
    """The type codes a TypeSel serves (its fields that are not None)."""
    return frozenset(t for f, t in T._FIELD_TYPE.items() if getattr(sel, f) is not None)

def test_type_sel_names_exactly_its_types():
    s = T.type_sel([T.Q4_K, T.Q6_K])
    assert sel_types(s) == {T.Q4_K, T.Q6_K}
    assert (s.any, s.k, s.b, s.fl) == (0, 0, None, None)
    s = T.type_sel([T.F16, T.Q8_0])
    assert sel_types(s) == {T.F16, T.Q8_0} and (s.k, s.b, s.fl) == (None, 0, 0)
    empty = T.type_sel([])
    assert empty.any is None and sel_types(empty) == frozenset()
    assert sel_types(T.all_types()) == T.SUPPORTED_QTYPES
    with pytest.raises(ValueError, match="not supported"):
        T.type_sel([T.Q4_K, 99])


def test_fused_types_send_each_type_to_its_product():
    ts = fused_types({T.Q8_0}, {T.Q4_K, T.Q5_0, T.F32}, q8=True)
    assert sel_types(ts.i) == {T.Q4_K, T.Q5_0}            # the int8 kernels
    assert sel_types(ts.f) == {T.F32}                     # no int8 kernel: float32 activations
    assert sel_types(ts.emb) == {T.Q8_0}
    ts = fused_types({T.Q8_0}, {T.Q4_K, T.F32}, q8=False)
    assert sel_types(ts.f) == {T.Q4_K, T.F32} and ts.i.any is None


def test_all_types_is_one_selection_for_every_file(tiny_path, tiny_dir, monkeypatch):
    """SPECNB_KERNEL_TYPES=all (the suite's setting) gives every model the same pass, a file that
    asks for more interleaved layouts (forge's repack, the requantized drafts) included: one that
    differed would compile a whole forward pass again (about 100 s on a 2-core CI machine)."""
    from specnb.gguf.forge import requantize
    from specnb.run.backend_cpu import file_repacked
    monkeypatch.setenv("SPECNB_KERNEL_TYPES", "all")
    src = tiny_path("Q8_0")
    asks = load_model(requantize(src, tiny_dir / "all-types-repack-Q4_0.gguf", "Q4_0", repack=True))
    assert file_repacked(asks) == (T.Q4_0,)
    sels = {act: {Context(m, n_ctx=8, activations=act).backend._fused_types for m in (load_model(src), asks)}
            for act in ("q8", "f32")}
    assert [len(s) for s in sels.values()] == [1, 1]
    (q8,), (f32,) = sels["q8"], sels["f32"]
    assert f32.i.any is None and sel_types(f32.f) == T.SUPPORTED_QTYPES
    assert {t for f, t in T._X16_FIELD_TYPE.items() if getattr(q8.i, f) is not None} == T.X16_QTYPES
    from specnb.kernels.matmul_q8 import _Q8_SEL        # matmul_q8's entry point reuses the pass's kernels
    assert q8.i == _Q8_SEL


def test_a_pair_shares_one_selection(tiny_path):
    from specnb.run.pair import open_pair
    p = open_pair(tiny_path("Q4_0"), tiny_path("Q6_K"), n_ctx=32)
    assert p.ctx_tgt.backend._fused_types == p.ctx_dft.backend._fused_types
    emb_t, mats_t = model_qtypes(p.target)
    assert {T.Q4_0, T.Q6_K} <= mats_t | model_qtypes(p.draft)[1]


def test_bad_kernel_types_setting_is_refused(tiny_path, monkeypatch):
    monkeypatch.setenv("SPECNB_KERNEL_TYPES", "some")
    with pytest.raises(ParamError, match="SPECNB_KERNEL_TYPES='some'"):
        Context(load_model(tiny_path("Q4_0")), n_ctx=16)


_FRESH = r"""
import json, sys
import numpy as np
from specnb.run.context import Batch, Context
from specnb.kernels import matmul, matmul_q8
from specnb.model import load_model
ctx = Context(load_model(sys.argv[1]), n_ctx=16, activations="q8")
logits = ctx.decode(Batch.from_tokens([3, 4, 5], 0, 0, "all"))
compiled = lambda f: len(f.signatures) > 0
print(json.dumps({"logits": logits.view(np.uint32).tolist(),
                  "q8_q4_0": compiled(matmul_q8._rows_q4_0),
                  "q8_q8_0": compiled(matmul_q8._rows_q8_0), "q8_q6_k": compiled(matmul_q8._rows_q6_k),
                  "q8_q4_1": compiled(matmul_q8._rows_q4_1), "f32_q4_0": compiled(matmul._rows_q4_0),
                  "f32_q4_k": compiled(matmul._rows_q4_k)}))
"""


def test_a_cold_start_compiles_only_the_models_kernels(tiny_path, tmp_path):
    path = tiny_path("Q4_0")          # the layers' matrices Q4_0, the (tied) embedding Q8_0
    assert model_qtypes(load_model(path)) == (T.Q8_0, {T.Q4_0, T.Q8_0})
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), SPECNB_KERNEL_TYPES="model")
    r = subprocess.run([sys.executable, "-c", _FRESH, path], capture_output=True, text=True,
                       timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert got["q8_q4_0"] and got["q8_q8_0"]
    assert not (got["q8_q6_k"] or got["q8_q4_1"] or got["f32_q4_0"] or got["f32_q4_k"])
    # the same logits, to the bit, as the all-types pass of this process
    ctx = Context(load_model(path), n_ctx=16, activations="q8")
    # (with every interleaved layout, those this file's matrices are made into included)
    assert ctx.backend._fused_types.i == T.type_sel(T.SUPPORTED_QTYPES - T.FLOAT_QTYPES | T.X16_QTYPES)
    want = ctx.decode(Batch.from_tokens([3, 4, 5], 0, 0, "all"))
    assert np.array_equal(np.asarray(got["logits"], np.uint32), want.view(np.uint32))
