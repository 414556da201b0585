"""The drafting / verification / rollback figures against the quantities they draw."""
import numpy as np
import pytest

pytest.importorskip("plotly")

from specnb.figures import maths as fs  # noqa: E402
from specnb.speculation.events import RoundEvent, SlotRound  # noqa: E402

P = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
Q = np.array([0.30, 0.35, 0.15, 0.15, 0.05])


def test_tv_distance_is_one_minus_the_overlap():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(7)), rng.dirichlet(np.ones(7))
        assert fs.tv_distance(p, q) == pytest.approx(1.0 - np.minimum(p, q).sum())
    assert fs.tv_distance(P, P) == 0.0
    assert fs.tv_distance([1, 0], [0, 1]) == 1.0


def test_overlap_and_residual_stack_to_p():
    f = fs.fig_p_q_overlap(P, Q, labels=list("abcde"))
    p_bar, q_bar, overlap, resid = f.data[:4]
    assert list(p_bar.y) == pytest.approx(P) and list(q_bar.y) == pytest.approx(Q)
    assert list(overlap.y) == pytest.approx(np.minimum(P, Q))
    assert list(resid.base) == pytest.approx(overlap.y)            # the residual sits on the overlap
    assert np.add(overlap.y, resid.y) == pytest.approx(P)          # ... and the two make p
    assert "0.850" in f.layout.title.text and "0.150" in f.layout.title.text   # beta, 1 - beta


def test_draft_confidence_marks_where_each_p_min_stops():
    ps = [0.842, 0.332, 0.311, 0.242, 0.337]
    assert [fs.first_stop(ps, m) for m in (0.0, 0.3, 0.5, 0.9)] == [None, 3, 1, 0]
    f = fs.fig_draft_confidence(ps, [0.3, 0.5, 0.9, 0.1])
    assert list(f.data[0].y) == ps
    stops = f.data[1:]
    assert [list(s.x) for s in stops] == [[3], [1], [0], []]
    assert [s.name.split(": ")[1] for s in stops] == ["drafts 3 tokens", "drafts 1 token",
                                                       "drafts 0 tokens", "drafts 5 tokens"]
    assert [shape.y0 for shape in f.layout.shapes] == [0.3, 0.5, 0.9, 0.1]


def test_draft_rows_grid_has_one_cell_per_row():
    batches = [[(0, "a@3"), (1, "b@5"), (2, "c@4")], [(0, "d@4"), (1, "e@6")], [(0, "f@5")]]
    f = fs.fig_draft_rows(batches)
    z = f.data[0].z
    assert [sum(1 for s in range(3) if z[s][j]) for j in range(3)] == [3, 2, 1]
    assert f.data[0].text[1][1] == "e@6" and z[2][1] is None
    assert list(f.data[0].x)[0].endswith("3 rows")


def test_alpha_interval_is_the_binomial_standard_error():
    a, h = fs.alpha_interval(30, 100)
    assert a == 0.3 and h == pytest.approx(1.96 * np.sqrt(0.3 * 0.7 / 100))
    assert fs.alpha_interval(0, 0) == (0.0, 0.0)
    f = fs.fig_alpha_vs_temperature([0.0, 1.0], {"exact": [(5, 10), (1, 10)], "rejection": [(5, 10), (8, 10)]})
    assert list(f.data[0].y) == [0.5, 0.1] and list(f.data[1].y) == [0.5, 0.8]
    assert list(f.data[1].error_y.array) == pytest.approx([fs.alpha_interval(5, 10)[1],
                                                           fs.alpha_interval(8, 10)[1]])


def test_slot_positions_colour_each_row_by_the_verdict():
    # seq 0: id_last at 3, draft at 4, 5, 6; one accepted -> 4 accepted, 5 rejected, 6 never judged
    r0 = SlotRound(seq=0, n_past=3, id_last=1, draft=[7, 8, 9], batch_pos=[3, 4, 5, 6], n_accepted=1)
    # seq 1: all 2 accepted
    r1 = SlotRound(seq=1, n_past=5, id_last=1, draft=[7, 8], batch_pos=[5, 6, 7], n_accepted=2)
    assert fs.slot_cells(r0, 8) == [0, 0, 0, 1, 2, 3, 4, None]
    assert fs.slot_cells(r1, 8) == [0, 0, 0, 0, 0, 1, 2, 2]
    f = fs.fig_slot_positions([RoundEvent(round=0, slots=[r0, r1])])
    hm = f.data[0]
    assert list(hm.y) == ["round 0 · seq 0", "round 0 · seq 1"]
    assert list(hm.x) == list(range(8)) and hm.z[0][4] == 2 and hm.z[1][7] == 2
    assert [t.name for t in f.data[1:]] == [name for name, _ in fs.SLOT_CELLS]
