"""specnb.chat_template: the chat template rendered as HF transformers does, within budgets."""
from __future__ import annotations

import pytest

from specnb.errors import ParamError, VocabError
from specnb.vocab import Vocab
from vocab_cases import smollm_meta, smollm_vocab, spm_meta


@pytest.fixture
def smol_meta():
    return smollm_meta()


@pytest.fixture
def smol():
    return smollm_vocab()


@pytest.mark.slow
def test_smollm_chat_template(smol):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    out = smol.apply_chat_template(msgs)
    assert out == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                   "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                   "<|im_start|>assistant\n")
    no_gen = smol.apply_chat_template(msgs, add_generation_prompt=False)
    assert no_gen == out[:-len("<|im_start|>assistant\n")]
    sys_msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert smol.apply_chat_template(sys_msgs).startswith("<|im_start|>system\nBe brief.<|im_end|>")
    ids = smol.tokenize(out)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2
    with pytest.raises(ParamError):
        smol.apply_chat_template("not a list")
    with pytest.raises(ParamError):
        smol.apply_chat_template([{"content": "no role"}])


def test_chat_template_errors():
    v = Vocab.from_metadata(spm_meta())
    with pytest.raises(VocabError, match="no tokenizer.chat_template"):
        v.apply_chat_template([{"role": "user", "content": "hi"}])
    tmpl = "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}" \
           "{{ bos_token }}[{{ messages[0]['content'] }}]{{ eos_token }}"
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": tmpl}))
    assert v.apply_chat_template([{"role": "user", "content": "x"}]) == "<s>[x]</s>"
    with pytest.raises(VocabError, match="one message only"):
        v.apply_chat_template([{"role": "user", "content": "x"}] * 2)
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": "{% for %}"}))
    with pytest.raises(VocabError, match="cannot render"):
        v.apply_chat_template([{"role": "user", "content": "x"}])
    # the sandbox refuses attribute games
    v = Vocab.from_metadata(spm_meta(**{
        "tokenizer.chat_template": "{{ messages.__class__.__mro__[1].__subclasses__() }}"}))
    with pytest.raises(VocabError):
        v.apply_chat_template([{"role": "user", "content": "x"}])
