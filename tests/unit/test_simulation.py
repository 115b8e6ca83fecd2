"""The paper's simulation: population statistics, determinism, learning, JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrank.cli import main
from frecency.history import Transition
from frecency.registry import get_model
from frecency.synthetic import (
    BUCKET_DAYS,
    PopulationConfig,
    VisitPool,
    draw_history,
    draw_population,
)
from frecency.urlbar import HistoryText, searchable_text
from simulation.aggregation import PlainSum
from simulation.evaluation import gap_closed
from simulation.rounds import SimulationConfig, run_simulation

CONFIG = PopulationConfig()


@pytest.fixture(scope="module")
def population_stats() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2024)
    pool = VisitPool(rng, CONFIG.now_us)
    histories = [draw_history(rng, CONFIG, pool) for _ in range(150)]
    # Read the features back from the Page objects, not from what drew them.
    types, ages, counts = [], [], []
    for history in histories:
        for page in history.pages:
            types.append(int(page.visits[0].transition))
            ages.append((CONFIG.now_us - page.visits[0].time_us) // (86_400 * 10**6))
            counts.append(page.visit_count)
    return np.array(types), np.array(ages), np.array(counts)


def test_visit_types_follow_the_notebook(
    population_stats: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    types, _, _ = population_stats
    assert types.size > 5000
    shares = [np.mean(types == t) for t in (Transition.LINK, Transition.TYPED, Transition.BOOKMARK)]
    np.testing.assert_allclose(shares, [0.6, 0.2, 0.2], atol=0.02)


def test_recency_buckets_follow_the_notebook(
    population_stats: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    _, ages, _ = population_stats
    edges = [high for _, high in BUCKET_DAYS]
    bucket = np.searchsorted(edges, ages, side="left")
    shares = np.bincount(bucket, minlength=5) / ages.size
    np.testing.assert_allclose(shares, [0.15, 0.15, 0.15, 0.2, 0.35], atol=0.02)
    assert ages.min() >= 0 and ages.max() <= 365


def test_visit_counts_are_exponential_with_mean_seven(
    population_stats: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    _, _, counts = population_stats
    assert counts.min() >= 1
    assert abs(counts.mean() - 7.0) < 0.35
    # Exponential: the median is well below the mean (ln 2 * 7 ~ 4.9).
    assert 4 <= np.median(counts) <= 6


def test_pages_keep_their_newest_ten_visits_of_one_type() -> None:
    rng = np.random.default_rng(5)
    history = draw_history(rng, CONFIG, VisitPool(rng, CONFIG.now_us))
    for page in history.pages:
        assert len(page.visits) == min(page.visit_count, 10)
        assert len({v.transition for v in page.visits}) == 1
        times = [v.time_us for v in page.visits]
        assert times == sorted(times, reverse=True)
        assert page.bookmarked == (page.visits[0].transition == Transition.BOOKMARK)
        assert page.typed == (page.visits[0].transition == Transition.TYPED)


def test_paper_preference_is_type_times_recency_times_count() -> None:
    rng = np.random.default_rng(6)
    history = draw_history(rng, CONFIG, VisitPool(rng, CONFIG.now_us))
    points = {Transition.LINK: 1.2, Transition.TYPED: 2.0, Transition.BOOKMARK: 1.4}
    recency = [100, 70, 50, 30, 10]
    edges = [high for _, high in BUCKET_DAYS]
    for page, value in zip(history.pages, history.paper_preference(), strict=True):
        age = (CONFIG.now_us - page.visits[0].time_us) // (86_400 * 10**6)
        bucket = int(np.searchsorted(edges, age, side="left"))
        expected = page.visit_count * points[page.visits[0].transition] * recency[bucket]
        assert value == pytest.approx(expected)


def test_a_query_matches_about_ten_pages_per_word() -> None:
    rng = np.random.default_rng(8)
    pool = VisitPool(rng, CONFIG.now_us)
    sizes = []
    for _ in range(40):
        history = draw_history(rng, CONFIG, pool)
        text = HistoryText.of_pages(history.pages)
        site = searchable_text(history.pages[0]).split(".")[0]
        sizes.append(text.matches(site).size)
    # Pages per site ~ N(10, 4), at least 1 (plus the odd page sharing the word).
    assert 8.0 <= float(np.mean(sizes)) <= 12.5


def test_population_is_deterministic_from_the_seed() -> None:
    model = get_model("firefox-2018")

    def draw(seed: int) -> tuple[np.ndarray, list[str]]:
        population = draw_population(np.random.default_rng(seed), CONFIG, model, "paper", 12)
        return population.preference, [q.text for c in population.catalogues for q in c]

    first, second, other = draw(1), draw(1), draw(2)
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1] == second[1]
    assert first[1] != other[1]


def test_plain_sum_adds_votes() -> None:
    votes = [np.array([1, -1, 0]), np.array([1, 1, 0]), np.array([1, 0, -1])]
    assert PlainSum().aggregate(votes).tolist() == [3, 0, -1]
    with pytest.raises(ValueError):
        PlainSum().aggregate([])


def test_gap_closed() -> None:
    assert gap_closed(0.5, 1.0, 0.95) == pytest.approx(0.9)
    assert gap_closed(2.0, 1.0, 1.1) == pytest.approx(0.9)


SMALL = SimulationConfig(participants=200, per_round=40, rounds=8, seed=3, held_out_people=60)


@pytest.fixture(scope="module")
def small_run() -> object:
    return run_simulation(SMALL)


def test_small_simulation_learns_under_paper_preference(small_run: object) -> None:
    from simulation.rounds import SimulationResult

    assert isinstance(small_run, SimulationResult)
    final = small_run.final
    assert final is not None
    assert len(small_run.rounds) == 8
    assert all(r.rejected is None for r in small_run.rounds)
    assert final.metrics.loss < 0.5 * small_run.baseline.loss
    assert final.metrics.accuracy > small_run.baseline.accuracy
    # Typed visits are worth 2000 / 100 = 20 links by default but 2 / 1.2 in truth.
    names = small_run.names
    ratio = (
        final.weights[names.index("typedVisitBonus")] / final.weights[names.index("linkVisitBonus")]
    )
    assert ratio < 20 * 0.5


def test_simulation_is_deterministic_from_the_seed() -> None:
    tiny = SimulationConfig(participants=60, per_round=12, rounds=2, seed=9, held_out_people=20)
    first = run_simulation(tiny).as_dict()
    assert run_simulation(tiny).as_dict() == first
    # Not trivially equal: the model moved away from the defaults.
    defaults = [int(w) for w in get_model("firefox-2018").spec.defaults()]
    assert any(row["weights"] != defaults for row in first["rounds"])


def test_simulate_command_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    code = main(
        [
            "simulate",
            "--participants", "60",
            "--per-round", "12",
            "--rounds", "2",
            "--held-out-people", "20",
            "--seed", "4",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) >= {"config", "baseline", "oracle", "rounds", "final"}
    assert data["config"]["participants"] == 60
    assert len(data["rounds"]) == 2
    for row in data["rounds"]:
        assert set(row) >= {"round", "loss", "accuracy", "chars_typed", "rank_selected", "weights"}
        assert len(row["weights"]) == 22
    assert data["final"] == data["rounds"][-1]
    for key in ("loss", "accuracy", "chars_typed", "rank_selected"):
        assert isinstance(data["baseline"][key], float)
        assert isinstance(data["oracle"][key], float)
    err = capsys.readouterr().err
    assert "baseline" in err and "oracle" in err and "2/2" in err


def test_simulate_command_rejects_bad_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--participants", "10", "--per-round", "20"]) == 2
    assert "per_round" in capsys.readouterr().err
