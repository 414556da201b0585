"""speculative-simple's flags against llama.cpp master 34af94cd's, read from its common/arg.cpp,
common.h and speculative.cpp (tests/data/master_34af94cd_spec_args.json): the names, the defaults,
the removed flags, the type list and its priority order."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specnb.app.cli import build_parser
from specnb.app.flags import SAME, effective_default, flag as table_flag
from specnb.speculation.params import NOT_IMPLEMENTED, PRIORITY, SPEC_TYPES, SpecParams

MASTER = json.loads((Path(__file__).parent / "data" / "master_34af94cd_spec_args.json").read_text())
# the master flags speculative-simple implements, and the two its README's command lines use that
# have no effect in specnb (-ngld, --spec-draft-p-split); the rest (devices, threads, other types'
# knobs) are listed in the data, not offered
OFFERED = ("--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min", "--spec-draft-model",
           "--spec-draft-ngl", "--spec-draft-p-split",
           "--spec-type", "--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m",
           "--spec-ngram-simple-min-hits", "--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m",
           "--spec-ngram-map-k-min-hits", "--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m",
           "--spec-ngram-map-k4v-min-hits", "--spec-ngram-mod-n-match", "--spec-ngram-mod-n-min",
           "--spec-ngram-mod-n-max")
VALUE = {"--spec-type": "ngram-simple", "--spec-draft-model": "x.gguf", "--spec-draft-p-min": "0.5",
         "--spec-draft-p-split": "0.5"}


def _parser():
    sub = build_parser()._subparsers._group_actions[0].choices
    return sub["speculative-simple"]


def _option(p, flag):
    return next(a for a in p._actions if flag in a.option_strings)


def _master(flag):
    return next(f for f in MASTER["flags"] if flag in f["names"])


@pytest.mark.parametrize("flag", OFFERED)
def test_master_flags_parse_under_every_name_with_masters_default(flag):
    p = _parser()
    f = _master(flag)
    assert "speculative" in f["examples"] and not f["removed"]
    act = _option(p, flag)
    # every name master gives the flag reaches the same value (--spec-type's repeats are a list)
    for name in f["names"]:
        value = VALUE.get(flag, "7")
        got = getattr(p.parse_args([name, value]), act.dest)
        assert str(got[-1] if isinstance(got, list) else got) == value, name
    if flag in MASTER["defaults"]:      # master's default, or specnb's stated in the help line
        want = MASTER["defaults"][flag]
        t = table_flag(flag)
        got = effective_default(t) if t.master == SAME else t.master
        assert str(got) == str(want), (flag, got, want)
        assert t.master == SAME or ("specnb's" in act.help and f"master: {want}" in act.help), flag


def test_c392e50_names_are_labelled_aliases():
    """Master refuses --draft/--draft-max/--draft-min (arg_removed); specnb keeps them, labelled."""
    p = _parser()
    for flag, primary in (("--draft-max", "--spec-draft-n-max"), ("--draft-min", "--spec-draft-n-min")):
        f = _master(flag)
        assert f["removed"]
        for name in f["names"]:
            act = _option(p, name)
            assert "c392e50" in act.help and primary in act.help and "34af94cd" in act.help
            assert act.dest == _option(p, primary).dest
            assert getattr(p.parse_args([name, "2"]), act.dest) in ("2", 2)
    # not given, the alias leaves master's default in place (the dataclass's: the rows write none)
    from specnb.app.flags import build
    sp = build(p.parse_args([]), "spec", SpecParams)
    assert (sp.n_max, sp.n_min) == (3, 0)


@pytest.mark.parametrize("flag", ["--spec-ngram-size-n", "--spec-ngram-size-m", "--spec-ngram-min-hits"])
def test_shared_ngram_flags_are_refused_as_master_does(flag, capsys):
    assert _master(flag)["removed"]
    with pytest.raises(SystemExit) as e:
        _parser().parse_args([flag, "3"])
    assert e.value.code == 2
    err = capsys.readouterr().err      # llama-server's own stub; speculative-simple: "invalid argument"
    assert f"invalid argument: {flag}, as llama-speculative-simple at master 34af94cd says" in err
    assert "llama-server refuses it as removed: use the respective --spec-ngram-*" in err


def test_check_rate_is_gone():
    assert not any("--spec-ngram-check-rate" in f["names"] for f in MASTER["flags"])
    with pytest.raises(SystemExit):
        _parser().parse_args(["--spec-ngram-check-rate", "2"])


def test_type_names_and_priority_are_masters():
    assert PRIORITY == tuple(MASTER["priority"]["order"])
    names = MASTER["type_names"]["names"]
    for n in names:      # each is specnb's, or refused with the reason
        assert (n in SPEC_TYPES) != (n in NOT_IMPLEMENTED), n
    assert set(SPEC_TYPES) | set(NOT_IMPLEMENTED) == set(names)


def test_per_type_ngram_sizes_reach_their_impl():
    from specnb.speculation.speculative import build_speculative
    sp = SpecParams(types="ngram-simple,ngram-map-k", ngram_simple_size_n=2, ngram_simple_size_m=5,
                    ngram_map_k_size_n=3).validate()
    spec = build_speculative(sp, target=None, ctx_dft=None)
    simple, map_k = spec.impls
    assert (simple.type, simple.size_n, simple.size_m) == ("ngram-simple", 2, 5)
    assert (map_k.type, map_k.size_n, map_k.size_m) == ("ngram-map-k", 3, 48)   # size_m: the shared 48
    with pytest.raises(Exception, match="ngram_map_k_size_m"):
        SpecParams(ngram_map_k_size_m=0).validate()
    with pytest.raises(Exception, match="ngram_simple_min_hits"):       # master: "at least 1"
        SpecParams(ngram_simple_min_hits=0).validate()
    sp = SpecParams(types="ngram-map-k4v", ngram_min_hits=2, ngram_map_k4v_min_hits=3).validate()
    assert build_speculative(sp, target=None, ctx_dft=None).impls[0].min_hits == 3
    sp = SpecParams(types="ngram-map-k", ngram_min_hits=2).validate()
    assert build_speculative(sp, target=None, ctx_dft=None).impls[0].min_hits == 2


def test_the_draft_model_rule_is_labelled(capsys):
    """Master: -md alone speculates not at all ('failed to initialize ...'); specnb keeps c392e50's
    rule (a draft model means draft-simple) and its help says which is which."""
    from specnb.app.cli import main
    assert MASTER["defaults"]["--spec-type"] == "none"
    h = " ".join(_option(_parser(), "--spec-type").help.split())
    assert "c392e50's rule" in h and MASTER["no_spec_type"]["message"] in h and "34af94cd" in h
    assert SpecParams().resolved_types(has_draft_model=True) == ("draft-simple",)
    assert SpecParams().resolved_types(has_draft_model=False) == ()
    assert main(["speculative-simple", "-p", "x", "--spec-type", "draft-eagle3"]) == 2
    err = capsys.readouterr().err
    assert "'draft-eagle3' is llama.cpp's but not in specnb" in err and NOT_IMPLEMENTED["draft-eagle3"] in err
