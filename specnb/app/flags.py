"""From the flag table (flag_table.py) to what the commands use:

  add_flags(parser, command, groups=None)   the argparse options, grouped as `--help` shows them
  build(args, "sampler"/"spec", cls)        the dataclass, from the fields the flags name
  docs_section()                            the flag list of docs/commands.md
  spec_flags(params)                        the speculative-simple flags that give a SpecParams

tests/test_flags.py holds the table against the dataclasses' defaults, `--help`, docs/commands.md and
master's facts in tests/data/master_34af94cd_spec_args.json.
"""
from __future__ import annotations

import argparse
import re

from ..errors import ParamError
from .flag_table import ABSENT, BEYOND, FLAGS, GROUPS, SAME, Flag, flag, flags_of  # noqa: F401


# ---- defaults and help lines ---------------------------------------------------------------------
def _dataclass(kind: str):
    if kind == "sampler":
        from ..run.sampling import SamplerParams
        return SamplerParams()
    from ..speculation.params import SpecParams
    return SpecParams()


def field_default(f: Flag):
    """The value the field takes when the flag is not given (per-type n-gram knobs resolved)."""
    obj = _dataclass(f.kind)
    v = getattr(obj, f.field_name)
    for knob in ("size_n", "size_m", "min_hits"):
        if v is None and f.field_name.startswith("ngram_") and f.field_name.endswith("_" + knob):
            v = obj.ngram_knobs(f.field_name[len("ngram_"):-len(knob) - 1].replace("_", "-"))[knob]
    return v


def effective_default(f: Flag):
    """The value the command uses when the flag is not given: the field's value for the table's
    default, or the dataclass's own default."""
    if f.default is None:
        return field_default(f) if f.field else None
    return f.to_field(f.default) if f.to_field else f.default


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list)):
        return ";".join(map(str, v)) if v else "none"
    return str(v)


def shown_default(f: Flag) -> str:
    if f.shown is not None:
        return f.shown
    if f.default is None and f.field:
        return _fmt(field_default(f))
    return _fmt(f.default)


def describe(f: Flag) -> str:
    """What the flag does, BEYOND first when master has no such option or meaning."""
    return f"{BEYOND} {f.help}" if f.beyond else f.help


def help_line(f: Flag) -> str:
    """The --help line: what it does, the default, and how it differs from master."""
    if f.action == "removed":
        return argparse.SUPPRESS
    text = describe(f)
    if f.alias_of:
        return text
    if f.action not in ("store_true", "store_false") or f.shown is not None:
        d = shown_default(f)
        if f.master not in (SAME, ABSENT):
            why = f": {f.why}" if f.why else ""
            text += f" (default: {d}, specnb's{why}; master: {_fmt(f.master)})"
        else:
            text += f" (default: {d})"
    return text + (f"; {f.note}" if f.note else "")


class _Removed(argparse.Action):
    """A flag llama-speculative-simple at master 34af94cd does not take: refused as master's
    parser refuses it ("invalid argument", common/arg.cpp:825), with what to use."""

    def __init__(self, option_strings, dest, hint="", **kw):
        self.hint = hint
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"invalid argument: {option_string}, as llama-speculative-simple at master 34af94cd "
                     f"says ({self.hint})")


# a value that starts with '-' and is a number, as master's parser takes it (-1e30, -inf, -.5, -3+1
# for -l): argparse reads only -5 and -0.5 as values unless told (no option of the table looks so)
NEGATIVE_VALUE = re.compile(r"^-(?:\.?\d|inf(?:inity)?$|nan$)", re.I)


def add_flags(p: argparse.ArgumentParser, command: str, groups=None) -> None:
    """The table's options of `command` (only `groups`, when given), grouped as --help lists them."""
    p._negative_number_matcher = NEGATIVE_VALUE
    made = {}
    for f in flags_of(command, groups):
        if GROUPS.get(f.group) is None:
            g = p
        elif f.group not in made:
            g = made[f.group] = p.add_argument_group(GROUPS[f.group])
        else:
            g = made[f.group]
        kw = dict(dest=f.dest, help=help_line(f).replace("%", "%%"))
        if f.action == "removed":
            g.add_argument(*f.names, action=_Removed, hint=f.hint, help=argparse.SUPPRESS)
            continue
        if f.action in ("store_true", "store_false"):
            # (the second flag of an on/off pair leaves the default to the first)
            kw.update(action=f.action, default=argparse.SUPPRESS if f.action == "store_false" else f.default)
        else:
            if f.action:
                kw["action"] = f.action
            if f.alias_of:
                kw["default"] = argparse.SUPPRESS        # an alias leaves the flag's default alone
            else:
                kw["default"] = f.default
            for k in ("type", "choices", "metavar", "nargs", "const"):
                if getattr(f, k) is not None:
                    kw[k] = getattr(f, k)
        g.add_argument(*f.names, **kw)


# ---- parsed args -> the dataclasses ---------------------------------------------------------------
def _flag_error(e: Exception, f: Flag) -> ParamError:
    return ParamError(f"{f.label}: {e}", field=getattr(e, "field", None))


def values(a, kind: str) -> tuple[dict, dict]:
    """The fields of `kind` ("sampler" or "spec") that the parsed args set, per the table, and the
    flag that set each."""
    kw, by = {}, {}
    for f in FLAGS:
        if f.kind != kind or not hasattr(a, f.dest):
            continue
        v = getattr(a, f.dest)
        if v is None:
            continue
        if f.field_name in by:
            raise ParamError(f"give either {by[f.field_name].names[0]} or {f.names[0]}, not both")
        try:
            v = f.to_field(v) if f.to_field else v
        except ParamError as e:
            raise _flag_error(e, f) from None
        if v is not None:                         # (None: the flag leaves the field as it is)
            kw[f.field_name], by[f.field_name] = v, f
    return kw, by


def build(a, kind: str, cls):
    """cls(**values(a, kind)).validate(), a refused value named by the flag that set its field
    (the validators' ParamError.field)."""
    kw, by = values(a, kind)
    try:
        return cls(**kw).validate()
    except ParamError as e:
        if e.field not in by:
            raise
        raise _flag_error(e, by[e.field]) from None


# ---- docs/commands.md ------------------------------------------------------------------------------
DOCS_BEGIN = "<!-- flags: generated by specnb.app.flags.docs_section(); do not edit by hand -->"
DOCS_END = "<!-- flags: end -->"


def docs_section() -> str:
    """The flag list of docs/commands.md: every flag of speculative-simple with specnb's and master's
    defaults (`generate` takes the model, prompt, length, compute and sampling flags)."""
    out = [DOCS_BEGIN, "", "| flag | default | master 34af94cd | what it does |", "|---|---|---|---|"]
    for f in flags_of("speculative-simple"):
        if f.action == "removed":
            continue
        names = ", ".join(f"`{n}`" for n in f.names)
        if f.alias_of:
            d, master = f"as {f.alias_of}", "refused"
        else:
            d = ("on" if f.default else "off") if f.action == "store_true" and f.shown is None \
                else "" if f.action == "store_false" else shown_default(f)
            master = "specnb's" if f.beyond and not f.extends else "same" if f.master == SAME \
                else _fmt(f.master)
            if f.master not in (SAME, ABSENT):
                d += " (specnb's)"
        text = describe(f) + (f"; specnb's default: {f.why}" if f.why else "") + \
            (f"; {f.note}" if f.note else "")
        cells = [names] + [c.replace("|", "\\|").replace("\n", " ") for c in (d, master, text)]
        out.append("| " + " | ".join(cells) + " |")
    removed = ", ".join(f"`{f.names[0]}`" for f in flags_of("speculative-simple") if f.action == "removed")
    out += ["", f"Refused, as master's llama-speculative-simple refuses them (\"invalid argument\"): "
                f"{removed}.", "", DOCS_END]
    return "\n".join(out)


def update_docs(path) -> bool:
    """Write docs_section() between the markers of `path`; True if the file changed."""
    from pathlib import Path
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    i, j = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    new = text[:i] + docs_section() + text[j:]
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text


# ---- SpecParams -> flags ---------------------------------------------------------------------------
def spec_flags(params) -> list:
    """The speculative-simple flags that give `params` (a SpecParams), in the table's order: for each
    flag of a `spec.` field whose value is not the one the command takes without it, its first name
    and the value (a store_true flag alone; --spec-type's types joined with commas). build() of the
    parsed flags gives `params` back (its types as the parser spells them); a field no flag sets
    (the shared n-gram sizes but through the per-type flags, the synthetic seed) is left out."""
    from ..speculation.draft_len import AUTO_CAP, HEURISTIC_CAP
    from ..speculation.params import parse_spec_types
    out, done = [], set()
    for f in FLAGS:
        if f.kind != "spec" or f.alias_of or f.action == "removed" or f.field_name in done \
                or "speculative-simple" not in f.commands:
            continue
        done.add(f.field_name)
        v, d = getattr(params, f.field_name), effective_default(f)
        if f.field_name == "n_max":                 # N | auto[:CAP] | heuristic[:CAP]
            v = {f"auto:{AUTO_CAP}": "auto", f"heuristic:{HEURISTIC_CAP}": "heuristic"}.get(
                params.draft_max, params.draft_max)
            d = str(d)
        elif f.field_name == "types":
            v = None if v is None else ",".join(parse_spec_types(v))
        elif v is None and f.field_name.startswith("ngram_"):      # a per-type knob: the shared one
            v = getattr(params, "ngram_" + next(k for k in ("size_n", "size_m", "min_hits")
                                                if f.field_name.endswith(k)))
        if v == d:
            continue
        if f.action == "store_true":
            if v != (f.to_field(True) if f.to_field else True):
                raise ParamError(f"{f.names[0]} cannot give {f.field_name}={v!r}")
            out.append(f.names[0])
        else:
            out += [f.names[0], ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    return out


if __name__ == "__main__":          # python -m specnb.app.flags docs/commands.md
    import sys
    print("updated" if update_docs(sys.argv[1]) else "unchanged")
