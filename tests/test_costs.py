"""specnb.measure.costs: the machine's costs measured once per pair, with their spread, recorded,
read back by every reader, and measured again when the record is old, damaged or was taken on a
busy machine."""
import json
import time

import pytest

from specnb.measure import costs
from specnb.measure.bench import decode_bytes, draft_decode_bytes
from specnb.measure.verdict import Interval


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "RECORD", None)          # a new process: nothing remembered
    monkeypatch.setattr(costs, "READ_IDS", [])
    return tmp_path


@pytest.fixture(scope="module")
def tiny(pair):
    from specnb.run.pair import open_pair
    return open_pair(*pair, n_ctx=96)


def small(monkeypatch):
    # fewer sizes and repetitions: the tiny pair's record in seconds
    monkeypatch.setattr(costs, "SIZES", (1, 2, 3, 5))
    monkeypatch.setattr(costs, "REPS", 3)
    monkeypatch.setattr(costs, "BANDWIDTH_GIB", 0.02)
    monkeypatch.setattr(costs, "BUSY", 1.0)             # kept however busy this machine is now


def test_a_record_holds_every_cost_with_its_spread(tiny, cache, monkeypatch):
    small(monkeypatch)
    v = costs.measure_costs(tiny, reps=3, sizes=(1, 2, 3, 5))
    c = costs.Costs.from_json(v)
    assert costs._valid(v) and costs.Costs.from_json(c.as_json()) == c          # JSON both ways
    assert sorted(c.bc_target) == sorted(c.bc_draft) == [1, 2, 3, 5]
    for bc in (c.bc_target, c.bc_draft):
        assert bc[1].estimate == 1.0
        for a, b in zip([1, 2, 3], [2, 3, 5]):                                    # monotone in k
            assert bc[a].estimate <= bc[b].estimate and bc[a].low <= bc[b].low and bc[a].high <= bc[b].high
    for iv in (c.c, c.target_step_ms, c.draft_step_ms, c.bandwidth_gb_s):
        assert isinstance(iv, Interval) and 0 < iv.low <= iv.estimate <= iv.high
    assert c.c.n == c.reps == 3
    assert c.c_bytes == pytest.approx(decode_bytes(tiny.draft) / decode_bytes(tiny.target))
    assert c.n_threads == tiny.ctx_tgt.n_threads and c.activations == tiny.ctx_tgt.activations
    j = json.loads(json.dumps(c.as_json()))
    assert set(j["c"]) >= {"median", "min", "max"} and set(j["bc_target"]["5"]) >= {"median", "min", "max"}
    text = costs.format_costs(c, ks=(2, 5))
    assert c.id in text and "c = " in text and "bc(5)" in text and c.date[:10] in text


def test_bc_is_reported_monotone_whatever_the_repetitions_say():
    per_rep = [{1: 1.0, 2: 1.5, 3: 1.2, 4: 2.0}, {1: 1.0, 2: 1.1, 3: 1.4, 4: 1.3}]
    bc = costs._monotone(per_rep, (1, 2, 3, 4))
    meds = [bc[k].estimate for k in (1, 2, 3, 4)]
    assert meds == sorted(meds) and bc[3].estimate == pytest.approx(1.3)        # max(1.3, median 1.3)
    assert bc[4].high == 2.0 and bc[3].high == 1.5                               # the 1.5 at k=2 carries on


def test_measured_once_then_read_by_everyone(tiny, cache, monkeypatch):
    small(monkeypatch)
    said = []
    c1 = costs.machine_costs(tiny, on_measure=said.append)
    assert len(said) == 1 and costs.READ_IDS == [c1.id]
    assert f"for {c1.target} with {c1.draft} once" in said[0]                  # the names the record prints
    monkeypatch.setattr(costs, "RECORD", None)                                  # a new process
    monkeypatch.setattr(costs, "measure_costs", lambda *a, **kw: pytest.fail("measured again"))
    assert costs.machine_costs(tiny, on_measure=said.append) == c1 == costs.recorded_costs(tiny)
    assert len(said) == 1


def test_another_head_activation_or_thread_count_is_another_record(tiny, cache, monkeypatch):
    small(monkeypatch)
    assert costs.costs_key(tiny, None) != costs.costs_key(tiny, 64)
    said = []
    full, head = costs.machine_costs(tiny), costs.machine_costs(tiny, draft_vocab=64, on_measure=said.append)
    assert "(head of 64 tokens) once" in said[0]                                 # two records, told apart
    assert full.id != head.id and head.draft_vocab == 64 and full.draft_vocab is None
    assert head.draft_gb == pytest.approx(draft_decode_bytes(tiny.draft, 64) / 1e9) and head.draft_gb < full.draft_gb
    assert tiny.ctx_dft.output_ids is None                                      # the draft's head as it was
    assert str(tiny.ctx_tgt.n_threads) + " threads" in costs.costs_key(tiny)


def test_refresh_measures_again(tiny, cache, monkeypatch):
    small(monkeypatch)
    a = costs.machine_costs(tiny)
    b = costs.machine_costs(tiny, refresh=True)
    assert a.id != b.id and costs.recorded_costs(tiny) == b


def test_an_old_record_is_measured_again(tiny, cache, monkeypatch):
    small(monkeypatch)
    old = costs.machine_costs(tiny)
    path = costs._the_record().path()
    recs = json.load(open(path))
    for v in recs.values():
        v["time"] = time.time() - costs.CLASS_DAY_S - 60
    open(path, "w").write(json.dumps(recs))
    monkeypatch.setattr(costs, "RECORD", None)
    assert costs.recorded_costs(tiny) is None and costs.machine_costs(tiny).id != old.id


@pytest.mark.parametrize("damage", [
    lambda v: v["bc_target"].pop("1"),                                   # no bc(1)
    lambda v: v["bc_target"]["3"].update(median=0.5),                    # not monotone
    lambda v: v["c"].update(min=float("nan")),
    lambda v: v.update(c="fast"),
    lambda v: v.pop("kernel_stamp")])
def test_a_damaged_record_is_measured_again_never_trusted(tiny, cache, monkeypatch, damage):
    small(monkeypatch)
    old = costs.machine_costs(tiny)
    path = costs._the_record().path()
    recs = json.load(open(path))
    for v in recs.values():
        damage(v)
    open(path, "w").write(json.dumps(recs))
    monkeypatch.setattr(costs, "RECORD", None)
    assert costs.recorded_costs(tiny) is None and costs.machine_costs(tiny).id != old.id


def test_a_record_taken_on_a_busy_machine_serves_its_process_only(tiny, cache, monkeypatch):
    small(monkeypatch)
    from specnb.measure import contention

    class Busy(contention.OtherLoad):
        def __exit__(self, *a):
            self.share = 0.6
    monkeypatch.setattr(contention, "OtherLoad", Busy)
    monkeypatch.setattr(costs, "BUSY", 0.25)
    c = costs.machine_costs(tiny)
    assert c.busy == 0.6 and "not kept" in costs.format_costs(c)
    monkeypatch.setattr(costs, "RECORD", None)
    assert costs.recorded_costs(tiny) is None


def test_the_record_lives_in_the_stamped_kernel_cache(tiny, cache, monkeypatch):
    from specnb.kernels import cache_folder
    small(monkeypatch)
    costs.machine_costs(tiny)
    assert costs._the_record().path() == f"{cache_folder()}/{costs.FILE}"
    assert costs.Costs.from_json(next(iter(json.load(open(costs._the_record().path())).values()))).kernel_stamp \
        == cache_folder().rsplit("/", 1)[1]


def test_the_command_prints_the_record_as_json(pair_paths, cache, monkeypatch, capsys):
    from specnb.app.cli import main
    small(monkeypatch)
    assert main(["costs", "-m", str(pair_paths[0]), "-md", str(pair_paths[1]), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["target"] == str(pair_paths[0]) and set(j["c"]) >= {"median", "min", "max"}
    assert main(["costs", "-m", str(pair_paths[0]), "-md", str(pair_paths[1])]) == 0
    assert j["id"] in capsys.readouterr().out                                 # read back, not measured again
    assert main(["costs", "-m", str(pair_paths[0]), "-md", str(pair_paths[1]), "--spec-draft-vocab", "-5"]) == 2


def test_auto_starts_from_the_pairs_record_with_the_lines_head(tiny, cache, monkeypatch):
    from specnb.measure.turns import auto_prior
    from specnb.speculation.params import SpecParams
    small(monkeypatch)
    assert auto_prior(tiny, SpecParams(n_max="auto")) is None                 # nothing recorded yet
    rec = costs.machine_costs(tiny, draft_vocab=64)
    p = rec.prior()
    assert p.target[5] == pytest.approx(rec.target_step_ms.estimate / 1e3 * rec.bc_target[5].estimate)
    assert p.draft[3] == pytest.approx(rec.draft_step_ms.estimate / 1e3 * rec.bc_draft[3].estimate)
    assert rec.id in p.source
    assert auto_prior(tiny, SpecParams(n_max="auto", draft_vocab=64)) == p   # the line's own head
    assert auto_prior(tiny, SpecParams(n_max="auto")) is None                 # another head: none recorded
    assert auto_prior(tiny, SpecParams(n_max=3, draft_vocab=64)) is None     # fixed lengths need none


def test_speculative_simple_with_auto_starts_from_the_record(pair_paths, cache, monkeypatch, capsys):
    from specnb.app.cli import main
    from specnb.run.pair import open_pair
    small(monkeypatch)
    argv = ["speculative-simple", "-m", str(pair_paths[0]), "-md", str(pair_paths[1]), "-p", "once upon a time",
            "-n", "8", "--spec-draft-n-max", "auto"]
    assert main(argv) == 0 and "auto: each length" not in capsys.readouterr().err      # no record yet
    rec = costs.machine_costs(open_pair(*pair_paths, n_ctx=96))
    assert main(argv) == 0
    assert f"auto: each length priced from the costs record {rec.id}" in capsys.readouterr().err
