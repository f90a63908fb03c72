"""The level rule: window, thresholds, bounds, only current-level results, state round trip."""

from __future__ import annotations

import pytest
from rlve.curriculum import DifficultyController


def feed(c: DifficultyController, level: int, n_right: int, n_wrong: int) -> None:
    for _ in range(n_right):
        c.observe(level, True)
    for _ in range(n_wrong):
        c.observe(level, False)


def test_moves_up_at_the_threshold_only_with_a_full_window():
    c = DifficultyController(num_levels=3, window=10, up=0.8, down=0.2)
    feed(c, 0, 8, 1)  # 9 results < window
    assert c.update(0) is None and c.level == 0
    feed(c, 0, 0, 1)  # 8/10 = 0.8: up
    move = c.update(1)
    assert (move.src, move.dst, move.accuracy) == (0, 1, 0.8)
    assert c.level == 1 and c.max_level == 1 and c.accuracy is None  # window emptied


def test_moves_down_below_the_lower_threshold_and_stays_in_between():
    c = DifficultyController(num_levels=3, level=2, window=4, up=0.75, down=0.25)
    feed(c, 2, 2, 2)  # 0.5: stays
    assert c.update(0) is None and c.level == 2
    feed(c, 2, 0, 4)  # window keeps the last 4: all wrong
    assert c.update(1).dst == 1 and c.max_level == 2


def test_ignores_results_of_other_levels_and_respects_bounds():
    c = DifficultyController(num_levels=2, window=2, up=0.5, down=0.0)
    feed(c, 1, 0, 5)  # drawn at a level not current: ignored
    assert c.accuracy is None
    feed(c, 0, 0, 2)  # accuracy 0 <= down at the bottom: nowhere to go
    assert c.update(0) is None
    c.results.clear()
    feed(c, 0, 2, 0)
    assert c.update(1).dst == 1
    feed(c, 1, 2, 0)  # top level: no move up
    assert c.update(2) is None and c.level == 1


def test_min_samples_lets_a_decision_come_before_the_window_fills():
    c = DifficultyController(num_levels=2, window=100, min_samples=4, up=0.75, down=0.1)
    feed(c, 0, 4, 0)
    assert c.update(0).dst == 1


def test_state_round_trip_and_refusals():
    c = DifficultyController(num_levels=3, window=4, up=0.5, down=0.1)
    feed(c, 0, 4, 0)
    c.update(3)
    feed(c, 1, 1, 1)
    d = DifficultyController(num_levels=3, window=4, up=0.5, down=0.1)
    d.load_state_dict(c.state_dict())
    assert (d.level, d.max_level, list(d.results)) == (1, 1, [True, False])
    assert [vars(m) for m in d.history] == [{"step": 3, "src": 0, "dst": 1, "accuracy": 1.0}]
    with pytest.raises(ValueError, match="outside 0..0"):
        DifficultyController(num_levels=1).load_state_dict(c.state_dict())
    with pytest.raises(ValueError, match="down_threshold < up_threshold"):
        DifficultyController(num_levels=2, up=0.2, down=0.5)
    with pytest.raises(ValueError, match="start_level"):
        DifficultyController(num_levels=2, level=2)
