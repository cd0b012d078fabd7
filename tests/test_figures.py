"""Figure helpers: predicted-time labels never print over each other."""

from nqf.app._report._figures import mark_times, new_figure


def _labels(ax):
    return [t.get_text().strip() for t in ax.texts]


def test_close_time_labels_are_joined_and_far_ones_kept_apart():
    fig, ax = new_figure()
    ax.set_xlim(0, 100)
    mark_times(ax, [10.0, 11.0, 50.0, float("nan")], ["t1", "t2", "t3", "t4"])
    assert _labels(ax) == ["t1,t2", "t3"]
    assert len(ax.lines) == 3  # one dashed line per finite time, the NaN skipped


def test_labels_follow_time_order_and_none_draws_lines_only():
    fig, ax = new_figure()
    ax.set_xlim(0, 100)
    mark_times(ax, [60.0, 20.0], ["late", "early"])
    assert _labels(ax) == ["early", "late"]
    fig, ax = new_figure()
    mark_times(ax, [1.0, 2.0], None)
    assert _labels(ax) == [] and len(ax.lines) == 2
