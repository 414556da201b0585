"""What one chat-template render may spend, and the sizes of results computed before they exist.

`Budget` holds what is left of each budget (see specnb/vocab/chat_template.py for the list);
the hooks of the rendering environment call it at every step. A value's size is estimated as
CPython lays it out (a header per object, 1 or 4 bytes per character, 8 per list slot),
counting a shared item each time it is referenced, which is what printing it would cost.

The estimators below give the size of an operation's result from its arguments, for the
operations whose result can be much larger than what they are given (`'x' * n`, `'%9999s' % x`,
`s.center(n)`, `items|join(sep)` ...), so that they are refused before they allocate.
"""
from __future__ import annotations

import math
import re
import string
import time

MAX_SOURCE_CHARS = 128 * 1024
MAX_SOURCE_TOKENS = 32 * 1024    # jinja2 tokens; a real template has about one per 5 characters
TIME_S, TIME_S_PER_MIB = 2.0, 1.0
MAX_STEPS = 100_000
MAX_VALUE_BYTES = 4 << 20
MAX_MEMORY_BYTES = 32 << 20
MAX_OUTPUT_CHARS = 1 << 20
MAX_INT_BITS = 1 << 16
_CLOCK_EVERY = 32           # thread_time() is a system call: read it every 32 events


class BudgetExceeded(BaseException):
    """A budget broken while rendering. A BaseException, so that no `except Exception` inside
    jinja2 can swallow it on its way out."""

    def __init__(self, budget: str, detail: str):
        super().__init__(budget, detail)
        self.budget, self.detail = budget, detail


def size_of(value, limit: float = math.inf, known: dict | None = None) -> int:
    """Estimated bytes of `value` and all it holds, as CPython lays them out (an object's header,
    a character's width, a slot per item), counting a shared item each time it is referenced;
    the walk stops once past `limit`. `known`: id -> (container, size) of containers measured
    before (a container cannot change in the immutable sandbox)."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += 49 + len(v) if v.isascii() else 80 + 4 * len(v)
        elif isinstance(v, (bytes, bytearray)):
            total += 33 + len(v)
        elif known is not None and id(v) in known:
            total += known[id(v)][1]
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 56 + 8 * len(v)
            if total <= limit:
                stack.extend(v)
        elif isinstance(v, dict):
            total += 64 + 40 * len(v)
            if total <= limit:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, int) and not isinstance(v, bool):
            total += 28 + v.bit_length() // 8
        else:
            total += 32
        if total > limit:
            return total
    return total


def depth_of(value, limit: int = 10_000) -> int:
    """How deeply lists and dicts nest in `value` (counted up to `limit`)."""
    depth, stack = 0, [(value, 1)]
    while stack and depth <= limit:
        v, d = stack.pop()
        depth = max(depth, d)
        if isinstance(v, (list, tuple)):
            stack.extend((x, d + 1) for x in v)
        elif isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
    return depth


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n / 1024:,.0f} KiB"


class Budget:
    """What one render may still spend; `scale` is the size of the messages and other inputs,
    so that long messages stay welcome."""

    def __init__(self, scale: int):
        self.deadline = time.thread_time() + TIME_S + TIME_S_PER_MIB * scale / 2**20
        self.limits = {"steps": MAX_STEPS + 4 * scale, "value": MAX_VALUE_BYTES + 4 * scale,
                       "memory": MAX_MEMORY_BYTES + 16 * scale,
                       "output": MAX_OUTPUT_CHARS + 4 * scale}
        self.steps, self.value = self.limits["steps"], self.limits["value"]
        self.memory, self.output = self.limits["memory"], self.limits["output"]
        self._events = 0
        # sizes of the large lists and dicts made so far (kept alive until the render ends,
        # which the memory budget counts anyway), so that growing one costs no new walk
        self._known: dict[int, tuple] = {}

    def size(self, value) -> int:
        n = size_of(value, self.value, self._known)
        if isinstance(value, (list, tuple, dict)) and len(value) >= 16 and n <= self.value:
            self._known[id(value)] = (value, n)
        return n

    @staticmethod
    def refuse(budget: str, detail: str):
        raise BudgetExceeded(budget, detail)

    def event(self) -> None:
        """Any operation: check the clock now and then."""
        self._events += 1
        if self._events % _CLOCK_EVERY == 0 and time.thread_time() > self.deadline:
            self.refuse("time", f"more than {TIME_S:g} s of CPU")

    def step(self) -> None:
        """A loop iteration or a call."""
        self.steps -= 1
        if self.steps < 0:
            self.refuse("steps", f"more than {self.limits['steps']:,} loop iterations and calls")
        self.event()

    def will_spend(self, seconds: float, what: str) -> None:
        """Before an operation that cannot be interrupted and takes about `seconds` of CPU."""
        if time.thread_time() + seconds > self.deadline:
            self.refuse("time", f"{what} would take about {seconds:.1f} s of CPU, past "
                                f"{TIME_S:g} s in all")

    def will_make(self, nbytes: float, what: str) -> None:
        """Before an operation that makes a value of about `nbytes`."""
        if nbytes > self.value:
            self.refuse("value", f"{what} would make about {_mib(nbytes)}, more than "
                                 f"{_mib(self.limits['value'])} in one value")
        if nbytes > self.memory:
            self.refuse("memory", f"{what} would take the values made past "
                                  f"{_mib(self.limits['memory'])}")

    def made(self, value, what: str, size: int | None = None):
        """After an operation: count what it made (of `size` when known); returns `value`."""
        self.event()
        if isinstance(value, (str, bytes, bytearray, list, tuple, dict, set, frozenset)):
            if size is not None and isinstance(value, (list, tuple)) and len(value) >= 16:
                self._known[id(value)] = (value, size)
            n = self.size(value) if size is None else size
            self.will_make(n, what)
            self.memory -= n
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            self.refuse("numbers", f"{what} made a {value.bit_length():,}-bit integer (at most "
                                   f"{MAX_INT_BITS:,} bits)")
        return value

    def write(self, n_chars: int) -> None:
        """Characters written to the output (or to a macro's or a block's buffer)."""
        self.output -= n_chars
        if self.output < 0:
            self.refuse("output", f"more than {self.limits['output']:,} characters written")
        self.memory -= n_chars
        if self.memory < 0:
            self.refuse("memory", f"the values made passed {_mib(self.limits['memory'])}")

    def integer_bits(self, bits: float, what: str) -> None:
        if bits > MAX_INT_BITS:
            self.refuse("numbers", f"{what} would make an integer over {MAX_INT_BITS:,} bits")


# ---- sizes of results, from the arguments ---------------------------------------------------
def _char_bytes(s) -> int:
    return 4 if isinstance(s, str) and not s.isascii() else 1


def _int(x, default=0):
    return x if isinstance(x, int) and not isinstance(x, bool) else default


def _number(digits: str) -> float:
    return int(digits) if len(digits) < 12 else math.inf


_PRINTF_FIELD = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.S)


def printf_size(fmt, args) -> float:
    """`fmt % args`: the text, each field's width and precision, the arguments as printed
    (a width or precision given by `*` counts as the largest integer argument)."""
    extra = 0.0
    for m in _PRINTF_FIELD.finditer(fmt):
        for g in m.group(1, 2):
            if g == "*":
                ints = [_int(a) for a in (args if isinstance(args, tuple) else (args,))]
                extra += max(map(abs, ints), default=0)
            elif g:
                extra += _number(g)
        extra += 400                # a float's digits, a repr's quotes
    return len(fmt) * _char_bytes(fmt) + 4 * extra + 6 * size_of(args)


def format_size(fmt: str, args, kwargs) -> float:
    """`fmt.format(*args, **kwargs)`; a width given by a nested field cannot be bounded."""
    extra = 0.0
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return 0                    # format() raises the same error
    for _, name, spec, _ in fields:
        if name is None:
            continue
        if spec and "{" in spec:
            return math.inf
        extra += sum(_number(d) for d in re.findall(r"\d+", spec or "")) + 400
    return len(fmt) * _char_bytes(fmt) + 4 * extra + 6 * size_of((args, kwargs))


def replace_size(s, old, new, count=None) -> float:
    if not isinstance(s, (str, bytes)) or type(old) is not type(s) or type(new) is not type(s):
        return 0
    n = s.count(old) if old else len(s) + 1
    if 0 <= _int(count, -1) < n:
        n = count
    return (len(s) + n * max(len(new) - len(old), 0)) * max(_char_bytes(s), _char_bytes(new))


def join_size(sep, items) -> float:
    """`sep.join(items)`: the items as printed, and a separator between each two."""
    if isinstance(items, (str, bytes)):             # joins the characters
        return len(items) * (1 + len(sep)) * max(_char_bytes(items), _char_bytes(sep))
    if not isinstance(items, (list, tuple, set, frozenset, dict)):
        return 0
    return 6 * size_of(items) + len(items) * len(sep) * _char_bytes(sep)


def width_size(s, width, fill=" ") -> float:
    return max(len(s), _int(width)) * max(_char_bytes(s), _char_bytes(fill))


def json_size(value, indent) -> float:
    """Printed with an indent, every item is on a line of its own, indented by its depth."""
    n = size_of(value)
    w = len(indent) if isinstance(indent, str) else _int(indent)
    return 6 * n + (n * w * depth_of(value) if indent is not None and w > 0 else 0)


def method_size(method, args, kwargs) -> float | None:
    """For a bound method of a str or bytes that can grow its result: that result's size."""
    s, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
    if not isinstance(s, (str, bytes)):
        return None
    a = list(args)
    if name in ("center", "ljust", "rjust", "zfill"):
        return width_size(s, a[0] if a else kwargs.get("width"), a[1] if len(a) > 1 else " ")
    if name == "expandtabs":
        tab = _int(a[0] if a else kwargs.get("tabsize", 8))
        return (len(s) + s.count(b"\t" if isinstance(s, bytes) else "\t") * tab) * _char_bytes(s)
    if name == "replace":
        return replace_size(s, *a[:3], **kwargs)
    if name == "join":
        return join_size(s, a[0] if a else ())
    if name in ("split", "rsplit", "splitlines"):
        sep = a[0] if a and name != "splitlines" else kwargs.get("sep")
        has_sep = isinstance(sep, (str, bytes)) and sep
        pieces = len(s) // len(sep) + 1 if has_sep else len(s) // 2 + 1
        return 64 * pieces + len(s) * _char_bytes(s)     # a new string object per piece
    if name == "translate" and a and isinstance(a[0], dict):
        longest = max((len(v) for v in a[0].values() if isinstance(v, (str, bytes))), default=1)
        return len(s) * max(longest, 1) * 4
    return None


def _lines(s: str) -> int:
    return s.count("\n") + 1


# the filters whose result can be much larger than their input: filter name -> size of the
# result, from the filter's own arguments (after the environment or context jinja2 passes)
def _center(value, width=80, *_, **__):
    return width_size(str(value), width)


def _indent(s, width=4, *_, **__):
    w = len(width) if isinstance(width, str) else _int(width)
    return (len(str(s)) + _lines(str(s)) * max(w, 0)) * 4


def _wordwrap(s, width=79, break_long_words=True, wrapstring=None, *_, **__):
    s = str(s)
    breaks = len(s) // max(_int(width, 1), 1) + _lines(s)
    return (len(s) + breaks * len(wrapstring if isinstance(wrapstring, str) else "\n")) * 4


def _format(value, *args, **kwargs):
    return printf_size(str(value), kwargs or args)


def _join(value, d="", *_, **__):
    return join_size(str(d), value)


def _replace(s, old, new, count=None, *_, **__):
    return replace_size(str(s), old, new, count)


def _batch(value, linecount, *_, **__):
    return 8 * abs(_int(linecount))


def _slice(value, slices, *_, **__):
    return 64 * abs(_int(slices))


def _truncate(s, length=255, killwords=False, end="...", *_, **__):
    return (len(str(s)) + len(str(end))) * 4


def _tojson(value, ensure_ascii=False, indent=None, *_, **__):
    return json_size(value, indent)


def _pprint(value, *_, **__):
    return json_size(value, 1)


def _list(value, *_, **__):
    return 64 * len(value) if isinstance(value, (str, bytes)) else 0


def _sum(iterable, attribute=None, start=0, *_, **__):
    # adding lists or strings one by one copies the running total each time
    if isinstance(start, (list, tuple, str)) and isinstance(iterable, (list, tuple)):
        return len(iterable) * size_of(iterable) / 2
    return 0


FILTER_SIZE = {"center": _center, "indent": _indent, "wordwrap": _wordwrap, "format": _format,
               "join": _join, "replace": _replace, "batch": _batch, "slice": _slice,
               "truncate": _truncate, "tojson": _tojson, "pprint": _pprint, "list": _list,
               "sum": _sum}
# filters that take any iterable: a generator or a range is made a list first, to be measured
MATERIALIZE = ("join", "sum", "sort", "dictsort", "groupby", "unique", "min", "max", "batch",
               "slice", "list", "reverse")
# what a filter spends on its input beyond its result (CPU seconds, scratch bytes per item or
# character; measured with CPython 3.11 and jinja2 3.1 with 2x to spare), since one call cannot
# be interrupted: groupby and sort build a key per item, title and urlize split into words ...
_FILTER_WORK = {"groupby": (1.2e-5, 160), "sort": (8e-6, 280), "dictsort": (8e-6, 280),
                "urlize": (8e-6, 48), "wordwrap": (4e-6, 48), "title": (2e-6, 80),
                "striptags": (2e-6, 48), "pprint": (2e-6, 32), "unique": (2e-6, 32),
                "min": (2e-6, 16), "max": (2e-6, 16), "batch": (1e-6, 64), "slice": (2e-7, 32),
                "capitalize": (2e-7, 32), "urlencode": (2e-7, 24), "join": (2e-7, 24),
                "list": (2e-7, 16), "reverse": (2e-7, 16)}
_DEFAULT_WORK = (2e-7, 4)          # one copy of the input, at most


def filter_work(name: str, value) -> tuple[float, float]:
    """(CPU seconds, scratch bytes) a filter may spend on `value`."""
    n = len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 1
    seconds, nbytes = _FILTER_WORK.get(name, _DEFAULT_WORK)
    return seconds * n, nbytes * n
