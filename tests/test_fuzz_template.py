"""Fuzz chat templates: any template with any messages renders to a str or gives a SpecnbError.

Templates come from a seeded random grammar (loops over ranges, messages and strings, ifs,
sets, namespaces, macros that call themselves or each other, call and filter blocks, every
jinja2 filter with random arguments, string methods, operators on small and huge numbers,
strings and lists) and from a fixed list of adversarial ones (the hostile cases of the
budgets, deep nesting, recursion, huge literals, filters and methods that multiply strings:
center, indent, format, wordwrap, join over range, replace ...). Messages are random too.

Property, for every case, as for the GGUF fuzzer (test_fuzz_gguf.py): `apply_chat_template`
returns a str or raises a `SpecnbError`, within 5 s of CPU (the thread's, timed again without
the memory tracer when the traced run passes it), with peak Python
allocations (tracemalloc) under 16x the size of the template and messages + 64 MiB; and the
vocab still tokenizes as before. A summary line (cases, outcomes per budget, slowest case,
largest allocation) is printed when the module finishes. SPECNB_FUZZ_SCALE=10 runs ten times
the random cases, SPECNB_FUZZ_SEED=n draws others.
"""
from __future__ import annotations

import os
import random
import signal
import sys
import time
import tracemalloc
from collections import Counter

import pytest

from specnb.vocab import chat_template
from specnb.errors import SpecnbError
from specnb.vocab.template_budget import size_of
from specnb.vocab import Vocab
from vocab_cases import spm_meta

TIME_LIMIT_S = 5.0
HANG_ALARM_S = 30
MEM_FACTOR, MEM_SLACK = 16, 64 << 20
SCALE = float(os.environ.get("SPECNB_FUZZ_SCALE", "1"))
SEED = int(os.environ.get("SPECNB_FUZZ_SEED", "1619"))   # another seed for a long local hunt
N_RANDOM = 200

STATS: Counter = Counter()
WORST = {"cpu": (0.0, ""), "mem": (0, "")}

# ---- adversarial templates ------------------------------------------------------------------
BIG = 10**9
ADVERSARIAL = [
    # the hostile cases the budgets were made for
    "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
    "{{ 'x' * 10**10 }}",
    # repetitions, powers, ranges
    "{{ 10**10**10 }}", "{{ 9**999999 }}", "{{ (2**60000) * (2**60000) }}", "{{ [0] * 10**9 }}",
    "{{ ('ab',) * 10**8 }}", "{{ range(10**9)|list }}", "{{ range(100000)|list|length }}",
    "{{ 'x' * 4000000 }}", "{% set s = 'x' * 3000000 %}{{ s ~ s ~ s }}", "{{ ('x' * 3000000) + 'y' * 3000000 }}",
    # filters and methods that multiply strings
    "{{ 'x'|center(10**9) }}", "{{ ('x\n' * 1000)|indent(10**6) }}", "{{ 'a\nb'|indent('x' * 10**6) }}",
    "{{ '%s'|format('x') * 10**9 }}", "{{ '%999999999d'|format(1) }}", "{{ '%*s'|format(10**9, 'x') }}",
    "{{ ('a ' * 100000)|wordwrap(1) }}", "{{ 'abcdef' * 1000|wordwrap(1, wrapstring='x' * 100000) }}",
    "{{ range(100000)|join('x' * 100000) }}", "{{ range(100000)|map('string')|join(' ' * 1000) }}",
    "{{ ('x' * 100000).replace('x', 'y' * 1000) }}", "{{ 'x'.ljust(10**9) }}", "{{ 'x'.zfill(10**9) }}",
    "{{ '\t'.expandtabs(10**9) }}", "{{ ('x' * 1000).join(['y'] * 100000) }}", "{{ '{:>999999999}'.format(1) }}",
    "{{ '{0:{1}}'.format('x', 10**9) }}", "{{ '{:.999999999f}'.format(1.5) }}", "{{ '%.999999999f' % 1.5 }}",
    "{{ ('ab ' * 1000000).split()|length }}", "{{ ('x' * 3000000)|list|length }}",
    "{{ [1]|batch(10**9, 0)|list }}", "{{ range(10)|slice(10**9)|list }}", "{{ 'abc'|truncate(10**9) }}",
    "{{ ([1] * 1000)|tojson(indent=10**6) }}", "{{ lipsum(10**6) }}", "{{ ([[1]*1000]*300)|sum(start=[])|length }}",
    "{{ 'x'.translate({120: 'y' * 10**6}) * 10 }}", "{{ ('<' * 100000)|striptags }}", "{{ ('(' * 100000)|urlize }}",
    "{{ ('a-' * 500000)|title|length }}",
    # growth in loops
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}{% endfor %}",
    "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
    "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
    "{% for i in range(100000) if i < 0 %}{% endfor %}{% for i in range(100000) if i < 0 %}{% endfor %}",
    "{% for c in 'x' * 1000000 %}{% endfor %}",
    # recursion and nesting
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% macro f(n) %}{{ g(n) }}{% endmacro %}{% macro g(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}",
    "{% macro f(n) %}{% for i in range(10) %}{{ f(n + 1) }}{% endfor %}{% endmacro %}{{ f(0) }}",
    "{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('x') }}",
    "{% macro f() %}{{ caller() }}{{ caller() }}{% endmacro %}{% call f() %}{% call f() %}"
    "{% call f() %}{{ 'x' * 1000000 }}{% endcall %}{% endcall %}{% endcall %}",
    "{% for x in [[1, [2]]] recursive %}{{ loop(x) }}{% endfor %}",
    "{% if 1 %}" * 400 + "x" + "{% endif %}" * 400,
    "{% for i in range(2) %}" * 30 + "x" + "{% endfor %}" * 30,
    "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}",
    "{{ " + "[" * 2000 + "]" * 2000 + " }}",
    "{{ " + "1 + " * 20000 + "1 }}",
    "{{ '" + "x" * 100000 + "' }}",
    "x" * (200 * 1024),
    # errors of other kinds
    "{% for %}", "{{ }}", "{% endfor %}", "{{ raise_exception('x' * 100000) }}", "{{ 1 / 0 }}",
    "{{ messages.__class__.__mro__ }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}", "{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as y %}",
    "{{ messages[10**9] }}", "{{ messages|attr('__class__') }}", "{{ strftime_now('%Y' * 100000)|length }}",
    "{{ ('9' * 5000)|int }}", "{{ (2**60000)|string }}", "{{ {}.fromkeys(range(100000), 'x' * 100000)|length }}",
    "{% set x = namespace() %}{% set x.__class__ = 1 %}", "{{ (messages|list).append(1) }}",
    "{{ dict(a=1).update(b=2) }}", "{{ self.__dict__ }}", "{{ loop }}", "{{ undefined_thing.x.y }}",
]

# ---- random templates -------------------------------------------------------------------------
FILTERS = ["abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort",
           "e", "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby",
           "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max",
           "min", "pprint", "random", "reject", "rejectattr", "replace", "reverse", "round",
           "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum",
           "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode", "urlize",
           "wordcount", "wordwrap", "xmlattr"]
METHODS = ["center", "ljust", "rjust", "zfill", "replace", "join", "split", "format", "strip",
           "upper", "startswith", "expandtabs", "splitlines", "count", "title", "encode"]
OPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "<", "in", "and", "or"]


class TemplateGen:
    """Random templates of at most about `size` statements and expressions."""

    def __init__(self, rng: random.Random, size: int = 40):
        self.r = rng
        self.left = size
        self.macros: list[str] = []

    def number(self):
        r = self.r.random()
        if r < 0.6:
            return str(self.r.randint(-3, 12))
        if r < 0.85:
            return str(self.r.choice([100, 1000, 10**5, 10**6, 10**9, 2**31, 10**18]))
        return f"({self.r.randint(2, 10)}**{self.r.choice([2, 10, 100, 10**4, 10**6])})"

    def string(self):
        r = self.r.random()
        if r < 0.75:
            return repr(self.r.choice(["", "x", "ab", " ", "\n", "%s", "{}", "{:>9}", "%9d", "é€😀",
                                       "<|im_start|>", "a\tb", "a-b c", "x,y"]))
        if r < 0.97:
            return f"({self.string()} * {self.number()})"
        return repr("y" * self.r.choice([100, 10**4, 10**5]))       # a huge literal

    def atom(self):
        r = self.r.random()
        if r < 0.25:
            return self.number()
        if r < 0.5:
            return self.string()
        if r < 0.65:
            return self.r.choice(["messages", "messages[0]", "messages[0]['content']",
                                  "messages[-1].role", "ns.v", "add_generation_prompt",
                                  "bos_token", "tools", "(messages|length)", "loop_var"])
        if r < 0.75:
            return f"range({self.number()})"
        if r < 0.85:
            return "[" + ", ".join(self.expr() for _ in range(self.r.randint(0, 3))) + "]"
        if r < 0.9:
            return "{" + ", ".join(f"{self.string()}: {self.expr()}"
                                   for _ in range(self.r.randint(0, 2))) + "}"
        if self.macros:
            return f"{self.r.choice(self.macros)}({self.expr()})"
        return self.number()

    def expr(self) -> str:
        self.left -= 1
        r = self.r.random()
        if self.left <= 0 or r < 0.3:
            return self.atom()
        if r < 0.55:
            return f"({self.atom()} {self.r.choice(OPS)} {self.expr()})"
        if r < 0.8:
            f = self.r.choice(FILTERS)
            args = ", ".join(self.expr() for _ in range(self.r.randint(0, 2)))
            return f"({self.atom()}|{f}" + (f"({args})" if args else "") + ")"
        if r < 0.9:
            m = self.r.choice(METHODS)
            args = ", ".join(self.expr() for _ in range(self.r.randint(0, 2)))
            return f"{self.string()}.{m}({args})"
        if r < 0.95:
            return f"{self.atom()}[{self.expr()}:{self.expr()}]"
        return f"({self.expr()} if {self.expr()} else {self.expr()})"

    def block(self) -> str:
        return "".join(self.stmt() for _ in range(self.r.randint(1, 3)))

    def stmt(self) -> str:
        self.left -= 1
        r = self.r.random()
        if self.left <= 0 or r < 0.25:
            return self.r.choice(["text ", "\n", "<|im_end|>", "{{ " + self.expr() + " }}"])
        if r < 0.4:
            it = self.r.choice(["messages", f"range({self.number()})", self.expr(), "('abc' * 1000)"])
            cond = f" if {self.expr()}" if self.r.random() < 0.2 else ""
            return f"{{% for loop_var in {it}{cond} %}}{self.block()}{{% endfor %}}"
        if r < 0.5:
            return f"{{% if {self.expr()} %}}{self.block()}{{% else %}}{self.block()}{{% endif %}}"
        if r < 0.6:
            return f"{{% set x = {self.expr()} %}}{{{{ x }}}}"
        if r < 0.7:
            return f"{{% set ns.v = {self.r.choice(['ns.v ~ ns.v', 'ns.v + ns.v', self.expr()])} %}}"
        if r < 0.8:
            name = f"mac{len(self.macros)}"
            self.macros.append(name)       # the body may call itself: recursion
            return (f"{{% macro {name}(a) %}}{self.block()}{{% endmacro %}}"
                    f"{{{{ {name}({self.expr()}) }}}}")
        if r < 0.87 and self.macros:
            return f"{{% call {self.r.choice(self.macros)}({self.expr()}) %}}{self.block()}{{% endcall %}}"
        if r < 0.93:
            f = self.r.choice(["upper", "center(80)", "indent(4)", "trim", "wordwrap(3)"])
            return f"{{% filter {f} %}}{self.block()}{{% endfilter %}}"
        return f"{{% set y %}}{self.block()}{{% endset %}}{{{{ y ~ y }}}}"

    def template(self) -> str:
        return "{% set ns = namespace(v='x') %}" + self.block()


def random_messages(rng: random.Random) -> list[dict]:
    out = []
    for _ in range(rng.randint(0, 5)):
        content = rng.choice(["hi", "", "é€😀\x00\ud800", "x" * rng.choice([10, 1000, 100000]),
                              "<|im_start|>user", "{{ 7 * 7 }}", "\n" * 50])
        m = {"role": rng.choice(["system", "user", "assistant", "tool", "x" * 100]), "content": content}
        if rng.random() < 0.2:
            m["tool_calls"] = [{"function": {"name": "f", "arguments": {"a": [1, 2, {"b": "c"}]}}}]
        out.append(m)
    return out or [{"role": "user", "content": "hello"}]


# ---- running one case ---------------------------------------------------------------------------
class _Hang(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Hang()


@pytest.fixture(scope="module")
def summary(pytestconfig):
    t0 = time.perf_counter()
    yield
    outcomes = ", ".join(f"{k}={n}" for k, n in STATS.most_common())
    line = (f"fuzz_template: {sum(STATS.values())} cases ({outcomes}); "
            f"{time.perf_counter() - t0:.0f} s; slowest {WORST['cpu'][0]:.2f} s CPU "
            f"({WORST['cpu'][1]}); largest allocation {WORST['mem'][0] / 2**20:.1f} MiB "
            f"({WORST['mem'][1]})")
    cap = pytestconfig.pluginmanager.getplugin("capturemanager")
    with cap.global_and_fixture_disabled() if cap else open(os.devnull):
        print("\n" + line, file=sys.stderr)


def _cpu_untraced(v: Vocab, messages: list, kwargs: dict) -> float:
    chat_template._COMPILED.pop(v.chat_template, None)     # compile again, as the first run did
    c0 = time.thread_time()
    try:
        v.apply_chat_template(messages, **kwargs)
    except SpecnbError:
        pass
    return time.thread_time() - c0


def check_case(template: str, messages: list, **kwargs) -> str:
    """The property, for one template; returns the outcome's name."""
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": template}), source="fuzz.gguf")
    before = v.tokenize("hello <|user|> world")
    size = len(template) + size_of(messages) + size_of(kwargs)
    desc = f"{template[:80]!r} ({len(template)} chars)"
    own = not tracemalloc.is_tracing()
    if own:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_ALARM_S)
    c0 = time.thread_time()
    try:
        out = v.apply_chat_template(messages, **kwargs)
        assert isinstance(out, str)
        outcome = "rendered"
    except SpecnbError as e:
        msg = str(e)
        assert msg.startswith("fuzz.gguf: ") and "\n" not in msg, msg
        budget = msg.split(" budget")[0].rsplit(" ", 1)[-1] if " budget" in msg else None
        outcome = f"{type(e).__name__}:{budget}" if budget else type(e).__name__
    except _Hang:
        pytest.fail(f"still rendering after {HANG_ALARM_S} s: {desc}")
    except BaseException as e:      # noqa: BLE001 -- exactly what the fuzzer hunts
        raise AssertionError(f"{type(e).__name__} (not a SpecnbError) on {desc}: {e}") from e
    finally:
        cpu = time.thread_time() - c0
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        peak = tracemalloc.get_traced_memory()[1] - base
        if own:
            tracemalloc.stop()
    STATS[outcome] += 1
    if cpu > WORST["cpu"][0]:
        WORST["cpu"] = (cpu, desc)
    if peak > WORST["mem"][0]:
        WORST["mem"] = (peak, desc)
    if cpu >= TIME_LIMIT_S and own:     # the memory tracer slows Python down ~6x: time it untraced
        cpu = _cpu_untraced(v, messages, kwargs)
    assert cpu < TIME_LIMIT_S, f"{cpu:.1f} s of CPU (untraced) on {desc}"
    assert peak < MEM_FACTOR * size + MEM_SLACK, f"allocated {peak >> 20} MiB on {desc}"
    assert v.tokenize("hello <|user|> world") == before, f"the vocab changed after {desc}"
    return outcome


@pytest.mark.parametrize("i", range(len(ADVERSARIAL)))
def test_adversarial_templates(summary, i):
    outcome = check_case(ADVERSARIAL[i], [{"role": "user", "content": "hi"}])
    if i < 2:       # the two hostile cases: refused by a budget
        assert outcome.startswith("VocabError:"), outcome


def test_random_templates(summary):
    rng = random.Random(SEED)
    for _ in range(int(N_RANDOM * SCALE)):
        gen = TemplateGen(rng)
        check_case(gen.template(), random_messages(rng),
                   tools=[{"name": "t", "parameters": {"a": 1}}] if rng.random() < 0.3 else None)
