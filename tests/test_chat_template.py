"""specnb.vocab.chat_template: the chat template rendered as HF transformers does, within budgets."""
from __future__ import annotations

import time
import tracemalloc

import pytest

from specnb.vocab import chat_template
from specnb.errors import ParamError, VocabError
from specnb.vocab.template_budget import MAX_SOURCE_TOKENS
from specnb.vocab import Vocab
from vocab_cases import smollm_meta, smollm_vocab, spm_meta


@pytest.mark.slow
def test_smollm_chat_template():
    smol = smollm_vocab()
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


# ---- budgets ------------------------------------------------------------------------------------
HOSTILE = {
    "steps": "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
    "value": "{{ 'x' * 10**10 }}",
}


def _render_measured(v: Vocab, messages=None):
    """(outcome, CPU seconds of this thread, peak Python allocations in bytes). The time is
    taken on a render without the memory tracer (which slows Python down ~6x), the peak on a
    second one; both compile the template."""
    messages = messages or [{"role": "user", "content": "hi"}]
    outs = []
    for traced in (False, True):
        chat_template._COMPILED.pop(v.chat_template, None)
        if traced:
            tracemalloc.start()
        t = time.thread_time()
        try:
            outs.append(v.apply_chat_template(messages))
        except VocabError as e:
            outs.append(e)
        finally:
            if traced:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            else:
                cpu = time.thread_time() - t
    assert str(outs[0]) == str(outs[1])
    return outs[0], cpu, peak


@pytest.mark.parametrize("budget", sorted(HOSTILE))
def test_hostile_templates_are_refused_quickly(budget):
    """Each ran for over a minute and grew past 7 GB / 22 GB before there were budgets."""
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": HOSTILE[budget]}),
                            source="evil.gguf")
    before = v.tokenize("hello <|user|> world")
    err, cpu, peak = _render_measured(v)
    assert isinstance(err, VocabError)
    assert str(err).startswith(f"evil.gguf: the chat template breaks its {budget} budget")
    assert "\n" not in str(err)
    # generous margins (a loaded 2-core machine): the budgets refuse in well under a second
    assert cpu < 5.0 and peak < 64 << 20, (cpu, peak)
    # nothing else is harmed: the same vocab tokenizes as before, and renders a good template
    assert v.tokenize("hello <|user|> world") == before
    v.chat_template = "{{ messages[0]['content'] }}!"
    assert v.apply_chat_template([{"role": "user", "content": "still here"}]) == "still here!"


@pytest.mark.parametrize("budget,template", [
    ("source", "x" * (200 * 1024)),
    ("source", "{{ " + "1+" * 20000 + "1 }}"),      # 40 KB, but 40,000 tokens to parse
    ("time", "{% set a = 'x' * 1000000 %}{% set b = 'x' * 999999 ~ 'y' %}"
             "{% for i in range(90000) %}{% if a == b or 'z' in a %}{% endif %}{% endfor %}"),
    ("value", "{{ 'x'|center(10**9) }}"),
    ("value", "{{ '%999999999d' % 1 }}"),
    ("value", "{{ range(100000)|join('x' * 100000) }}"),
    ("memory", "{% for i in range(1000) %}{% set s = 'x' * 100000 ~ i %}{% endfor %}"),
    ("output", "{% for i in range(20000) %}{{ 'x' * 100 }}{% endfor %}"),
    ("output", "{% macro m() %}{% for i in range(20000) %}{{ 'x' * 100 }}{% endfor %}{% endmacro %}"
               "{% set s = m() %}"),
    ("numbers", "{{ 2**40000 * 2**40000 }}"),
    ("numbers", "{{ 7 ** 100000 }}"),
    ("recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
])
def test_each_budget_is_named(budget, template):
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": template}), source="m.gguf")
    err, cpu, peak = _render_measured(v)
    assert isinstance(err, VocabError), err
    assert f"breaks its {budget} budget" in str(err), err
    assert cpu < 8.0 and peak < 64 << 20, (cpu, peak)


def test_budgets_leave_real_templates_alone():
    """A tool-calling template (namespaces, macros, loops, tojson, string methods) renders as
    plain jinja2 renders it, and long messages scale the budgets instead of breaking them."""
    import json as _json
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    tmpl = (
        "{% set ns = namespace(system='', n=0) %}"
        "{% macro show(m) %}<|{{ m.role }}|>{{ m.content|trim }}{% if m.tool_calls %}"
        "{% for c in m.tool_calls %}{{ c.function|tojson(indent=2) }}{% endfor %}{% endif %}"
        "<|end|>\n{% endmacro %}"
        "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = m.content %}"
        "{% else %}{% set ns.n = ns.n + 1 %}{{ show(m) }}{% endif %}{% endfor %}"
        "{% if tools %}{{ tools|map(attribute='name')|join(', ')|upper }}{% endif %}"
        "{{ ns.system.replace('\\n', ' ')|center(40) ~ ns.n|string }}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    msgs = [{"role": "system", "content": "Be\nbrief."}, {"role": "user", "content": " hi "},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "x": [1]}}]},
            {"role": "user", "content": "long " * 200000}]
    tools = [{"name": "add"}, {"name": "mul"}]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None: _json.dumps(x, indent=indent)
    want = env.from_string(tmpl).render(messages=msgs, tools=tools, add_generation_prompt=True)
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": tmpl}))
    assert v.apply_chat_template(msgs, tools=tools) == want
    # a template of about 3/4 of the token budget (a real one has a few thousand) still renders
    block = "{% if tools is none %}{{ messages[0].content|upper ~ 'x' ~ ns.n }}{% endif %}"
    n_block = sum(1 for _ in env.lex(block))
    big = tmpl + block * (MAX_SOURCE_TOKENS * 3 // 4 // n_block)
    assert MAX_SOURCE_TOKENS // 2 < sum(1 for _ in env.lex(big)) <= MAX_SOURCE_TOKENS
    v.chat_template = big
    assert v.apply_chat_template(msgs, tools=tools) == env.from_string(big).render(
        messages=msgs, tools=tools, add_generation_prompt=True)


@pytest.mark.slow
def test_cli_refuses_a_hostile_template_in_one_line(tiny_path, tmp_path, capsys):
    from specnb.gguf import forge
    from specnb.app.cli import main
    evil = forge.rewrite(tiny_path("Q8_0"), tmp_path / "evil.gguf",
                         metadata={"tokenizer.chat_template": HOSTILE["value"]})
    assert main(["tokenize", "-m", evil, "-p", "hi", "--chat"]) == 2
    err = capsys.readouterr().err
    assert "evil.gguf: the chat template breaks its value budget" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---- other metadata strings ------------------------------------------------------------------
@pytest.mark.slow
def test_no_regex_is_built_from_the_file():
    """A `tokenizer.ggml.pre` that looks like a catastrophic regex is only a name: unknown
    names fall back to the built-in "default" expressions, so tokenizing stays fast."""
    smol_meta = smollm_meta()
    evil = "(a+)+$"
    with pytest.warns(UserWarning, match="unknown or unsupported pre-tokenizer"):
        v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": evil}))
    from specnb.vocab.bpe import PRE_REGEXES
    assert v.pre == evil and v.pre_regexes == PRE_REGEXES["default"]
    t = time.thread_time()
    v.tokenize("a" * 50000 + "!")
    assert time.thread_time() - t < 2.0
