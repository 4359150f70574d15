"""Which cells ``python -m bench.run`` selects (pure: no server)."""

from __future__ import annotations

from bench.run import FULL, KAFKA_EXTRA, QUICK, kafka_cells, selected


def names(grid: list) -> list[str]:  # type: ignore[type-arg]
    return [f"{c.impl} {c.name}" for c, _ in grid]


def test_bench_kafka_runs_kip848_alone_beside_rebalanser_at_fifty_members() -> None:
    grid = selected(FULL + KAFKA_EXTRA, "N=10 R=1000 ,N=50 R=1000 ")
    kafka = names(kafka_cells(grid))
    assert "rebalanser resource-barrier N=50 R=1000" in names(grid)
    assert "rebalanser resource-barrier N=50 R=10000" not in names(grid), "a size is selected alone"
    assert [k for k in kafka if "N=50" in k] == ["kafka kafka-consumer N=50 R=1000"]
    assert sorted(k for k in kafka if "N=10" in k) == [f"kafka kafka-{p} N=10 R=1000"
                                                       for p in ("consumer", "cooperative", "eager")]


def test_the_quick_grid_runs_every_kafka_protocol() -> None:
    assert sorted(names(kafka_cells(QUICK))) == [f"kafka kafka-{p} N=3 R=30"
                                                 for p in ("consumer", "cooperative", "eager")]


def test_only_without_texts_keeps_the_grid() -> None:
    assert selected(FULL, "") == FULL
    assert names(selected(FULL, "global-barrier N=50 ")) == ["rebalanser global-barrier N=50 R=10000"]
