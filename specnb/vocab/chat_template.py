"""Chat templates: `tokenizer.chat_template` rendered as HF transformers does, within budgets.

A chat template comes from whatever file a learner downloaded: it is untrusted code. It runs in
jinja2's immutable sandbox (no attribute escapes, no changes to lists and dicts) and within
budgets that a real template never comes near (it renders in milliseconds and a few
kilobytes). Each budget but `source` and `numbers` grows with the size of the messages, so
long messages stay welcome (specnb/vocab/template_budget.py has the numbers and the accounting):

- source:  128 Ki characters and 32 Ki jinja2 tokens of template, checked before parsing (a
           long flat expression such as `1 + 1 + ...` costs its parse, before any budget runs);
- time:    2 s of CPU (+1 s per MiB of messages), checked at every loop iteration, call
           and operator;
- steps:   100,000 loop iterations and calls, counted at each one;
- value:   4 MiB for any one string, list or dict, checked before `*`, `**`, `%`, `+`, `~`
           and the filters and methods that multiply their input (center, indent, format,
           wordwrap, join, replace, ljust, batch, tojson ...) allocate, and after every other call;
- memory:  32 MiB of values made in all, counted as each is made;
- output:  1 Mi characters written, counted at every `{{ }}` and text, in macros and blocks too;
- numbers: 65,536-bit integers, checked before `*` and `**`.

A template that breaks a budget, or fails in any other way (a recursion too deep, a syntax
error, an exception), gives one `VocabError` naming the budget and the file; the vocab and
the process are left as they were.

How: the template's syntax tree is instrumented before it is compiled (each `for` body and
loop filter starts with a step, each output goes through a counter, each `~` through a
checked join); operators and calls go through the sandbox's `call_binop` and `call`, filters
through checked wrappers, slices through `getitem`. Constant folding is off, so nothing from
the template runs while it compiles.
"""
from __future__ import annotations

import inspect
import json
import math
import threading
import warnings
from datetime import datetime

from ..errors import ParamError, VocabError
from .template_budget import (FILTER_SIZE, MATERIALIZE, MAX_SOURCE_CHARS, MAX_SOURCE_TOKENS, Budget,
    BudgetExceeded, filter_work, format_size, method_size, printf_size, size_of)

_CONTAINERS = (str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _make_environment():
    import jinja2
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import generate_lorem_ipsum
    from jinja2.visitor import NodeTransformer

    def hook(name, *args, lineno=None):
        # environment._specnb_<name>(*args): a name the template cannot shadow
        return nodes.Call(nodes.EnvironmentAttribute(f"_specnb_{name}"), list(args), [], None,
                          None, lineno=lineno)

    class Instrument(NodeTransformer):
        def visit_For(self, node):
            self.generic_visit(node)
            step = nodes.ExprStmt(hook("step", lineno=node.lineno), lineno=node.lineno)
            node.body.insert(0, step)
            if node.test is not None:       # {% for x in xs if test %}: a step per item tested
                node.test = nodes.And(hook("step_true", lineno=node.lineno), node.test,
                                      lineno=node.lineno)
            return node

        def visit_Output(self, node):
            self.generic_visit(node)
            node.nodes = [hook("out", nodes.Const(c.data, lineno=c.lineno)
                               if isinstance(c, nodes.TemplateData) else c, lineno=c.lineno)
                          for c in node.nodes]
            return node

        def visit_Concat(self, node):
            self.generic_visit(node)
            return hook("concat", *node.nodes, lineno=node.lineno)

    class BudgetedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["+", "-", "*", "/", "//", "%", "**"])

        def __init__(self):
            super().__init__(trim_blocks=True, lstrip_blocks=True, optimized=False,
                             extensions=["jinja2.ext.loopcontrols"])
            self._local = threading.local()         # the budget of this thread's render
            # one object per hook, so that `call` knows them by identity
            self._specnb_step, self._specnb_step_true = self._step, self._step_true
            self._specnb_out, self._specnb_concat = self._out, self._concat
            self._hooks = {id(f): f for f in (self._specnb_step, self._specnb_step_true,
                                              self._specnb_out, self._specnb_concat)}
            self.filters["tojson"] = _tojson        # HF's, with its keyword arguments
            for name, f in list(self.filters.items()):
                self.filters[name] = self._checked_filter(name, f)
            self.globals["strftime_now"] = _strftime_now
            self.globals["raise_exception"] = self._raise_exception

        @property
        def budget(self) -> Budget:
            return self._local.budget

        def compile_instrumented(self, source: str):
            # the lexer stops at the budget, so a huge flat template costs only its first tokens
            for n, _ in enumerate(self.lex(source), 1):
                if n > MAX_SOURCE_TOKENS:
                    raise BudgetExceeded("source", f"more than {MAX_SOURCE_TOKENS:,} tokens")
            tree = Instrument().visit(self.parse(source))
            tree.set_environment(self)
            with warnings.catch_warnings():     # Python's own, about the template's code
                warnings.simplefilter("ignore", SyntaxWarning)
                return self.from_string(tree)

        # ---- hooks the instrumented tree calls
        def _step(self):
            self.budget.step()

        def _step_true(self):
            self.budget.step()
            return True

        def _out(self, value):
            b = self.budget
            if not isinstance(value, str):
                b.will_make(6 * b.size(value), "writing a value")
                b.write(len(str(value)))
            else:
                b.write(len(value))
            return value

        def _concat(self, *values):
            b = self.budget
            # a str joins as it is; anything else as printed (up to about 6x its size)
            b.will_make(sum(b.size(v) * (1 if isinstance(v, str) else 6) for v in values), "'~'")
            return b.made("".join(map(str, values)), "'~'")

        @staticmethod
        def _raise_exception(message):
            raise jinja2.TemplateError(str(message)[:300])

        def _checked_filter(self, name, f):
            pass_arg = getattr(f, "jinja_pass_arg", None)     # environment/context goes first
            first = 0 if pass_arg is None else 1
            estimate, env = FILTER_SIZE.get(name), self

            def checked(*args, **kwargs):
                b = env.budget
                b.step()
                if len(args) > first:
                    value = args[first]
                    if name in MATERIALIZE and not isinstance(value, _CONTAINERS):
                        try:
                            value = b.made(list(value), f"the {name} filter")
                            args = (*args[:first], value, *args[first + 1:])
                        except TypeError:
                            pass                    # not iterable: the filter says so
                    seconds, scratch = filter_work(name, value)
                    b.will_spend(seconds, f"the {name} filter")
                    b.will_make(scratch, f"the {name} filter")
                    if estimate is not None:
                        try:
                            n = estimate(*args[first:], **kwargs)
                        except TypeError:
                            n = 0                   # wrong arguments: the filter says so
                        b.will_make(n, f"the {name} filter")
                return b.made(f(*args, **kwargs), f"the {name} filter")

            if pass_arg is not None:
                checked.jinja_pass_arg = pass_arg
            return checked

        # ---- the sandbox's interception points
        def call_binop(self, context, operator, left, right):
            b = self.budget
            b.event()
            what, size = f"'{operator}'", None
            if operator == "*":
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(n, int) and isinstance(seq, (str, bytes, list, tuple)):
                    head = size_of(seq[:0])         # the empty one: the object's header
                    size = max(n, 0) * (b.size(seq) - head) + head
                    b.will_make(size, what)
                elif isinstance(left, int) and isinstance(right, int):
                    b.integer_bits(left.bit_length() + right.bit_length(), what)
            elif operator == "**" and isinstance(left, int) and isinstance(right, int) \
                    and right > 0 and abs(left) > 1:
                b.integer_bits(right * math.log2(abs(left)), what)
            elif operator == "+" and isinstance(left, (str, bytes, list, tuple)) \
                    and type(right) is type(left):
                size = b.size(left) + b.size(right) - size_of(left[:0])
                b.will_make(size, what)
            elif operator == "%" and isinstance(left, (str, bytes)):
                b.will_make(printf_size(left, right), what)
            result = super().call_binop(context, operator, left, right)
            return b.made(result, what, size if isinstance(result, (list, tuple)) else None)

        def getitem(self, obj, argument):
            value = super().getitem(obj, argument)
            if isinstance(argument, slice):
                return self.budget.made(value, "a slice")
            self.budget.event()
            return value

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's names)
            if __self._hooks.get(id(__obj)) is __obj:
                return __obj(*args)         # (jinja2 adds _loop_vars / _block_vars in loops)
            b = __self.budget
            b.step()
            what = f"calling {getattr(__obj, '__name__', type(__obj).__name__)}"
            n = __self._call_size(__obj, args, {k: v for k, v in kwargs.items()
                                                if k not in ("_loop_vars", "_block_vars")})
            if n is not None:
                b.will_make(n, what)
            return b.made(super().call(__context, __obj, *args, **kwargs), what)

        @staticmethod
        def _call_size(obj, args, kwargs):
            """The size of a call's result, for the calls that can multiply their input."""
            wrapped = getattr(obj, "__wrapped__", None)       # the sandbox's str.format
            try:
                if getattr(wrapped, "__name__", "") in ("format", "format_map") \
                        and isinstance(getattr(wrapped, "__self__", None), str):
                    fields = args[0] if wrapped.__name__ == "format_map" and args else kwargs
                    return format_size(wrapped.__self__, args, fields)
                if obj is generate_lorem_ipsum:
                    bound = inspect.signature(obj).bind_partial(*args, **kwargs).arguments
                    n, most = bound.get("n", 5), bound.get("max", 100)
                    return 12 * n * most if isinstance(n, int) and isinstance(most, int) else None
                return method_size(obj, args, kwargs)
            except TypeError:
                return None                 # wrong arguments: the call says so

    return BudgetedEnvironment()


_ENV = None
_ENV_LOCK = threading.Lock()
_COMPILED: dict[str, object] = {}       # template source -> compiled template (a few)


def _environment():
    global _ENV
    with _ENV_LOCK:
        if _ENV is None:
            _ENV = _make_environment()
        return _ENV


def render_chat_template(template: str, messages, add_generation_prompt: bool = True,
                         source: str = "", **kwargs) -> str:
    """Render `template` with `messages` (a list of dicts with a 'role') within the budgets."""
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise ParamError(f"invalid messages={messages!r:.80}: expected a list of dicts "
                         f"with 'role' and 'content'")
    for m in messages:
        if "role" not in m:
            raise ParamError(f"invalid message {m!r:.80}: it has no 'role'")
    where = f"{source}: " if source else ""
    if len(template) > MAX_SOURCE_CHARS:
        raise VocabError(f"{where}the chat template breaks its source budget: "
                         f"{len(template):,} characters, more than {MAX_SOURCE_CHARS:,}")
    env = _environment()
    values = dict(kwargs, messages=list(messages),
                  add_generation_prompt=bool(add_generation_prompt))
    env._local.budget = Budget(size_of(values))
    try:
        compiled = _COMPILED.get(template)
        if compiled is None:
            compiled = env.compile_instrumented(template)
            if len(_COMPILED) >= 8:
                _COMPILED.pop(next(iter(_COMPILED)))
            _COMPILED[template] = compiled
        return compiled.render(**values)
    except BudgetExceeded as e:
        problem = f"the chat template breaks its {e.budget} budget: {e.detail}"
    except RecursionError:
        problem = "the chat template breaks its recursion budget: it nests or recurses deeper " \
                  "than Python allows"
    except MemoryError:
        problem = "the chat template ran out of memory"
    except Exception as e:      # noqa: BLE001 -- any failure of untrusted code is the file's
        problem = f"cannot render the chat template: {type(e).__name__}: " \
                  f"{' '.join(str(e).split())[:300]}"
    finally:
        env._local.budget = None
    raise VocabError(where + problem)
