"""The GGUF reader: real files parse fast and lazily; bad files give a GGUFError naming the problem."""
import struct
import time

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from specnb import GGUFError, UnsupportedError
from specnb.gguf import forge
from specnb.gguf.file import GGUFFile
from specnb.model import load_model


def test_default_model_header(default_path):
    t0 = time.process_time()
    g = GGUFFile(default_path)
    dt = time.process_time() - t0
    assert g.metadata["general.architecture"] == "llama"
    assert len(g.metadata["tokenizer.ggml.tokens"]) == 49152
    assert len(g.tensors) == 272
    t = g.tensors["blk.0.ffn_down.weight"]
    assert t.shape == (1536, 576) and t.qtype == QT.Q4_1
    raw = g.tensor_bytes(t.name)
    assert raw.shape == (576, 1536 // 32 * 20) and not raw.flags.writeable
    # CPU time, with a wide margin: a guard against quadratic parsing, not a benchmark
    assert dt < 5.0, f"parsing the header took {dt:.2f} s of CPU"


def test_default_model_loads_fast_without_dequantizing(default_path):
    load_model(default_path, vocab_only=False)      # warm (first import, Numba cache)
    t0 = time.process_time()
    m = load_model(default_path)
    dt = time.process_time() - t0
    assert m.hparams.n_layer == 30 and m.hparams.n_embd == 576 and m.hparams.n_head_kv == 3
    assert m.hparams.tied_output and m.output is m.tok_embd
    # the matrices are views into the file's memory map, not copies
    assert not m.layers[0].wq.data.flags.owndata
    # CPU time with a wide margin (bench prints the wall time): loading must not dequantize
    assert dt < 5.0, f"loading the default model took {dt:.2f} s of CPU"


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.BF16, QT.Q8_0])
def test_vectors_decode_as_the_kernels_do(qtype):
    """Norms and biases of the float types are read without the kernels' decoder (which would
    compile for every type at a fresh install's first load); every type gives its values."""
    from specnb.kernels.matmul import dequantize
    from specnb.kernels.qtypes import random_blocks
    from specnb.model import _vector

    class File:            # the two things _vector reads of a GGUFFile
        path = "vectors.gguf"
        tensors = {"v": type("T", (), {"shape": (64,), "qtype": int(qtype), "type_name": qtype.name})()}

        @staticmethod
        def tensor_bytes(name):
            return raw
    raw = random_blocks(int(qtype), 1, 64, np.random.default_rng(int(qtype)))
    got = _vector(File(), "v", 64)
    assert got.dtype == np.float32 and got.shape == (64,)
    assert np.array_equal(got, dequantize(raw, int(qtype), 64).reshape(-1))


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_missing_path(tmp_path):
    with pytest.raises(GGUFError, match="not found"):
        GGUFFile(tmp_path / "nope.gguf")


def test_directory(tmp_path):
    with pytest.raises(GGUFError, match="directory"):
        GGUFFile(tmp_path)


def test_bad_magic(tmp_path):
    p = _write(tmp_path, "x.gguf", b"GGML" + b"\0" * 100)
    with pytest.raises(GGUFError, match="magic b'GGML'"):
        GGUFFile(p)


def test_absurd_counts_refused_before_allocating(tmp_path):
    p = _write(tmp_path, "x.gguf", b"GGUF" + struct.pack("<IQQ", 3, 2**62, 1) + b"\0" * 64)
    with pytest.raises(GGUFError, match="tensors, impossible"):
        GGUFFile(p)
    p = _write(tmp_path, "y.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 2**62) + b"\0" * 64)
    with pytest.raises(GGUFError, match="metadata entries, impossible"):
        GGUFFile(p)
    # a key whose string length is absurd
    p = _write(tmp_path, "z.gguf", b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**60) + b"\0" * 64)
    with pytest.raises(GGUFError, match="length"):
        GGUFFile(p)
    # an array claiming more elements than the file holds
    body = struct.pack("<Q", 3) + b"abc" + struct.pack("<IIQ", 9, 6, 2**40)
    p = _write(tmp_path, "w.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body + b"\0" * 16)
    with pytest.raises(GGUFError, match="claims 1099511627776 elements"):
        GGUFFile(p)


def test_bad_version(tmp_path):
    p = _write(tmp_path, "v.gguf", b"GGUF" + struct.pack("<IQQ", 99, 0, 0) + b"\0" * 16)
    with pytest.raises(GGUFError, match="version 99"):
        GGUFFile(p)


def test_truncations_at_every_section(tmp_path, tiny_path):
    src = tiny_path("Q8_0")
    data = open(src, "rb").read()
    g = GGUFFile(src)
    cuts = sorted({8, 16, 24, 40, 200, 2000, g.data_offset - 1, g.data_offset + 10,
                   len(data) // 2, len(data) - 1})
    for cut in cuts:
        p = _write(tmp_path, f"cut{cut}.gguf", data[:cut])
        with pytest.raises(GGUFError):
            load_model(p)
    assert open(src, "rb").read() == data     # the source was not touched


def test_unsupported_architecture(tmp_path, tiny_path):
    src = tiny_path("Q8_0")
    dst = tmp_path / "gemma.gguf"
    forge.rewrite(src, dst, metadata={"general.architecture": "gemma3"})
    # the writer sets the architecture itself: patch the copied key in place
    g = GGUFFile(dst)
    assert g.metadata["general.architecture"] in ("llama", "gemma3")
    from gguf import GGUFWriter
    w = GGUFWriter(str(tmp_path / "g2.gguf"), "gemma3")
    w.add_uint32("gemma3.block_count", 1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedError, match=r"'gemma3'.*llama, mistral, qwen2"):
        load_model(tmp_path / "g2.gguf")


def test_unsupported_tensor_type(tmp_path, tiny_path):
    src = tiny_path("Q4_K")
    rng = np.random.default_rng(0)

    def fn(t, raw):
        if t.name == "blk.1.attn_q.weight":
            from gguf import GGML_QUANT_SIZES
            blk, size = GGML_QUANT_SIZES[QT.IQ4_NL]
            return rng.integers(0, 255, (t.shape[1], t.shape[0] // blk * size), dtype=np.uint8), int(QT.IQ4_NL)
        return raw, t.qtype
    dst = forge.rewrite(src, tmp_path / "iq4nl.gguf", tensor_fn=fn)
    with pytest.raises(UnsupportedError, match=r"blk\.1\.attn_q\.weight has type IQ4_NL"):
        load_model(dst)
