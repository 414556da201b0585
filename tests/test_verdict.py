"""Verdicts from intervals (specnb.measure.verdict): the word only when the whole interval is on one side."""
import random
import statistics

import pytest

from specnb.errors import ParamError
from specnb.measure.verdict import (BOOTSTRAP_FROM, NOISE, ONE, Interval, band, check_said, interval,
                                    paired_ratios, row_price, said, speedup_verdict, ROW_PRICE_BANDS)


def test_few_pairs_give_their_min_and_max():
    iv = interval([1.2, 0.9, 1.5])
    assert (iv.estimate, iv.low, iv.high, iv.n, iv.method) == (1.2, 0.9, 1.5, 3, "min-max")


def test_many_pairs_give_a_bootstrap_interval_inside_the_range_and_around_the_median():
    xs = [1.0 + 0.01 * i for i in range(20)] + [3.0]           # one outlier
    iv = interval(xs)
    assert iv.method.startswith("bootstrap") and iv.n == len(xs)
    assert min(xs) <= iv.low <= statistics.median(xs) <= iv.high < 3.0    # the outlier does not set it
    assert interval(xs) == iv                                   # seeded: the same values, the same interval


def test_the_bootstrap_interval_covers_the_true_median_about_as_often_as_it_says():
    rng = random.Random(1)
    hits = sum(interval([rng.gauss(1.0, 0.1) for _ in range(9)], seed=k).crosses(1.0) for k in range(200))
    assert hits >= 150                                          # 90% nominal; the median's is a bit lower


@pytest.mark.parametrize("xs, word", [
    ([1.05, 1.2, 1.1], "wins"), ([0.8, 0.95, 0.9], "loses"),
    ([0.92, 1.23], NOISE),                          # a 'win' from pairs of 0.92 and 1.23 is not one
    ([1.004, 1.2], NOISE),                          # 1.00 as printed does not clear 1
    ([1.3], ONE)])
def test_the_word_needs_the_whole_interval_on_one_side(xs, word):
    iv = interval(xs)
    assert speedup_verdict(iv) == word
    assert said(iv).startswith(word)
    assert check_said(said(iv)) == []               # what is printed is read back the same


def test_a_printed_word_its_interval_does_not_support_is_found():
    assert check_said("line 5 wins (1.07x; 0.92-1.23x over 2 pairs).") == ["wins (1.07x; 0.92-1.23x over 2 pairs)"]
    assert check_said("it loses (0.95x; 0.90-1.01x over 3 pairs)") != []
    assert check_said("wins (1.10x, one pair)") != []
    assert check_said("within the noise (1.30x; 1.20-1.40x over 4 pairs)") != []
    assert check_said("wins (1.30x; 1.20-1.40x over 4 pairs), loses (0.80x; 0.70-0.90x over 9 pairs)") == []


@pytest.mark.parametrize("xs, word", [
    ([0.05, 0.09], "nearly free"), ([0.12, 0.24], "cheap"), ([0.28, 0.32], "not cheap"),
    ([0.20, 0.30], "between cheap and not cheap"), ([0.08, 0.30], "between nearly free and not cheap")])
def test_row_price_words_come_from_the_band_the_interval_lies_in(xs, word):
    assert row_price(interval(xs)) == word


def test_band_is_none_across_a_bound():
    assert band(interval([0.2, 0.3]), ROW_PRICE_BANDS, "not cheap") is None
    assert band(Interval(0.2, 0.2, 0.2, 1, "x"), ROW_PRICE_BANDS, "not cheap") == "cheap"


def test_paired_ratios_and_bad_input():
    assert paired_ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    for bad in ([], [float("nan")], ["x"]):
        with pytest.raises((ParamError, ValueError, TypeError)):
            interval(bad)
    with pytest.raises(ParamError, match="pairs"):
        paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ParamError, match="times"):
        paired_ratios([1.0], [0.0])


def test_text_and_json():
    iv = interval([1.1, 1.3, 1.2])
    assert iv.text() == "1.20x; 1.10-1.30x over 3 pairs"
    assert iv.as_json() == {"median": 1.2, "min": 1.1, "max": 1.3, "n": 3, "method": "min-max"}
    assert BOOTSTRAP_FROM == 5
