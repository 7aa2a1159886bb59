"""PRADA's before -> after table (studies/prada/summarize.py, docs/defenses/prada.md): a flag is 0 or 1 per
stream, so the flagged counts get the exact McNemar test on the streams one rule flags and the other does
not, never an interval of a 0/1 mean over 3 streams; min W gets the report's paired interval
(statistics design, paired Student t below 5 pairs)."""

from __future__ import annotations

import pytest
from _studies import study


@pytest.fixture(scope="module")
def summarize():
    return study("prada", "summarize.py")


def test_flag_counts_get_the_exact_mcnemar_test(summarize):
    five_go = summarize.paired_flags([1.0] * 5 + [0.0] * 19, [0.0] * 24)
    assert (five_go["flagged_before"], five_go["flagged_after"], five_go["only_before"]) == (5, 0, 5)
    assert five_go["mcnemar_exact_p"] == pytest.approx(2 * 0.5 ** 5)  # 0.0625: five flips cannot reach 5 %
    assert summarize.paired_flags([1.0] * 6 + [0.0] * 18, [0.0] * 24)["mcnemar_exact_p"] == pytest.approx(2 * 0.5 ** 6)
    # flips both ways cancel, and the streams both rules flag (or neither) carry no evidence
    both_ways = summarize.paired_flags([1, 0, 1, 1], [0, 1, 1, 1])
    assert both_ways["diff"] == 0.0 and both_ways["mcnemar_exact_p"] == pytest.approx(1.0)
    assert summarize.paired_flags([1, 1, 1], [1, 1, 1])["mcnemar_exact_p"] == 1.0


def test_min_w_gets_the_reports_paired_interval(summarize):
    from mebench.report.stats import paired_t_ci

    before, after = [0.90, 0.92, 0.95], [0.97, 0.98, 0.97]
    row = summarize.paired(before, after)
    t = paired_t_ci(before, after)
    assert row["ci_method"] == "t" and row["ci95"] == pytest.approx([t.ci_lower, t.ci_upper])
    assert row["diff"] == pytest.approx(0.05)
    table = summarize.before_after_table([{"dataset": "MNIST", "label": "benign",
                                           "flag_at_B": summarize.paired_flags([1, 0, 0], [0, 0, 0]), "min_w": row}])
    assert "| MNIST | benign | 3 | 1/3 -> 0/3 (p 1.000) | 0.923 -> 0.973 (+0.050 [" in table
