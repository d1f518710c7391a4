"""The seasonal forecast: which season it reads, how it scales, what the recommender does with it,
and the PromQL that reads it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tidescale.autoscaler.forecast import DAY_S, WEEK_S, Forecast, SeasonReading, period_name, seasonal_forecast
from tidescale.autoscaler.queries import TargetQueries, read_forecast, season_query
from tidescale.autoscaler.recommend import Observation, Recommender, RecommenderConfig
from tidescale.autoscaler.settings import ForecastSettings, RecommenderSettings, RecommenderTuning, TargetSettings
from tidescale.contracts.prometheus import PrometheusUnavailable

CAP = 100.0


def test_the_longest_season_held_wins_so_a_monday_is_read_from_last_monday() -> None:
    """A week with a weekend: on Monday at 08:55 yesterday (Sunday) was quiet and its 09:00 had no
    peak; last Monday's had one. On Saturday it is the other way round: Friday peaked, last Saturday
    did not. The week knows, the day does not."""
    monday = [SeasonReading(DAY_S, peak_rps=120.0, level_rps=100.0), SeasonReading(WEEK_S, 900.0, 300.0)]
    got = seasonal_forecast(monday, level_now=330.0, max_growth=2.0)
    assert got == Forecast(pytest.approx(990.0), WEEK_S, 900.0, pytest.approx(1.1))
    saturday = [SeasonReading(DAY_S, 900.0, 300.0), SeasonReading(WEEK_S, 120.0, 100.0)]
    assert seasonal_forecast(saturday, level_now=100.0, max_growth=2.0).rps == pytest.approx(120.0)  # type: ignore[union-attr]
    # In the first week only the day is held: it is what there is.
    first_week = [SeasonReading(DAY_S, 900.0, 300.0), SeasonReading(WEEK_S, None, None)]
    assert seasonal_forecast(first_week, 300.0, 2.0).period_s == DAY_S  # type: ignore[union-attr]


@pytest.mark.parametrize(("level_then", "level_now", "growth"), [
    (100.0, 150.0, 1.5),   # a busier day: the peak scaled up
    (100.0, 50.0, 0.5),    # a quieter one (a holiday): scaled down
    (100.0, 900.0, 2.0),   # at most max_growth: a retry storm now does not make yesterday's peak 9x
    (0.0, 80.0, 1.0),      # nothing then says nothing of the peak that followed it
    (None, 80.0, 1.0),
    (100.0, None, 1.0),
    (100.0, math.nan, 1.0),
])
def test_the_peak_is_scaled_by_todays_level(level_then: float | None, level_now: float | None, growth: float) -> None:
    got = seasonal_forecast([SeasonReading(DAY_S, 400.0, level_then)], level_now, max_growth=2.0)
    assert got is not None and got.growth == pytest.approx(growth) and got.rps == pytest.approx(400.0 * growth)


def test_no_history_no_forecast() -> None:
    assert seasonal_forecast([], 100.0, 2.0) is None
    assert seasonal_forecast([SeasonReading(DAY_S, None, 50.0), SeasonReading(WEEK_S, math.inf, 1.0)], 1.0, 2.0) is None
    assert seasonal_forecast([SeasonReading(DAY_S, -1.0, 50.0)], 1.0, 2.0) is None
    assert seasonal_forecast([SeasonReading(3600.0, 8.98846567431158e307, 0.5)], 1.0, 2.0) is None  # x 2 overflows


@given(st.lists(st.tuples(st.sampled_from([3600.0, DAY_S, WEEK_S]),
                          st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
                          st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))), max_size=4),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), st.floats(1.0, 10.0))
def test_whatever_prometheus_answers_the_forecast_is_none_or_a_finite_rate_within_the_growth_bound(
        readings: list[tuple[float, float | None, float | None]], now: float | None, growth: float) -> None:
    got = seasonal_forecast([SeasonReading(*r) for r in readings], now, growth)
    if got is not None:
        assert math.isfinite(got.rps) and got.rps >= 0 and 0 <= got.growth <= growth
        assert got.rps <= got.peak_rps * growth + 1e-9


def test_period_names() -> None:
    assert (period_name(DAY_S), period_name(WEEK_S), period_name(3600.0)) == ("1d", "7d", "3600s")


def _obs(t: float, rate: float, current: int, forecast: float | None) -> Observation:
    seasonal = None if forecast is None else Forecast(forecast, DAY_S, forecast, 1.0)
    return Observation(t, rate, 0.0, current, current, forecast=seasonal)


def test_the_recommender_scales_ahead_of_the_forecast_and_holds_through_it() -> None:
    r = Recommender(RecommenderConfig(CAP, down_delay_s=60.0))
    assert r.recommend(_obs(0, 300.0, 4, None)).desired == 4
    ahead = r.recommend(_obs(15, 300.0, 4, forecast=900.0))
    assert (ahead.desired, ahead.reason) == (10, "forecast")  # 900 / (100 x 0.9)
    # While the season's peak is still ahead or under way, the quiet rate does not scale it down.
    held = [r.recommend(_obs(t, 300.0, 10, forecast=900.0)).desired for t in range(30, 300, 15)]
    assert set(held) == {10}
    # Once it has passed, the down delay runs as ever.
    after = [r.recommend(_obs(t, 300.0, 10, forecast=None)).desired for t in range(300, 420, 15)]
    assert after[0] == 10 and after[-1] == math.ceil(300 / (CAP * 0.8))


def test_a_forecast_below_the_measured_need_changes_nothing() -> None:
    plain, told = Recommender(RecommenderConfig(CAP)), Recommender(RecommenderConfig(CAP))
    for t in range(0, 300, 15):
        a, b = plain.recommend(_obs(t, 450.0, 5, None)), told.recommend(_obs(t, 450.0, 5, forecast=100.0))
        assert (a.desired, a.reason) == (b.desired, b.reason)


def test_each_season_reads_the_lookahead_a_period_ago_with_a_margin_either_side() -> None:
    q = season_query("D", DAY_S, ahead_s=150.0, margin_s=120.0, level_window_s=600.0, rate_window_s=60.0)
    # [now - 1d - 120 s, now - 1d + 150 s + 120 s], and a rate window and a step more, for the sample
    # that holds a whole minute of a peak: a 510 s window ending 1d - 390 s ago
    assert (q.peak_window_s, q.peak_offset_s) == (510.0, DAY_S - 390.0)
    assert q.peak == "max_over_time((D)[510s:60s] offset 86010s)"
    assert q.level == "quantile_over_time(0.5, (D)[600s:60s] offset 86400s)"


def test_a_season_shorter_than_its_lookahead_reads_up_to_now_not_the_future() -> None:
    """An hour's period with an hour's lookahead: the window would end in the future; it ends now."""
    q = season_query("D", 3600.0, ahead_s=3600.0, margin_s=120.0, level_window_s=600.0, rate_window_s=60.0)
    assert (q.peak_window_s, q.peak_offset_s) == (3720.0, 0.0)
    assert q.peak == "max_over_time((D)[3720s:60s] offset 0s)"


def test_the_targets_forecast_reads_follow_the_settings() -> None:
    t = TargetSettings(deployment="triton", namespace="ml", model="m")
    q = TargetQueries.for_target(t, RecommenderTuning(), forecast=ForecastSettings(), cold_start_s=120.0)
    assert [s.period_s for s in q.seasons] == [DAY_S, WEEK_S]
    # cold start + lookahead extra + margins + the rate window and step of the sample that holds a peak
    assert q.seasons[0].peak_window_s == 120.0 + 30.0 + 2 * 120.0 + 60.0 + 60.0
    assert "nv_inference_request_failure" in q.seasons[0].peak and "or vector(0)" in q.seasons[0].peak
    off = TargetQueries.for_target(t, RecommenderTuning(), forecast=ForecastSettings(enabled=False))
    assert off.seasons == () and off.demand_level is None and "demand_level" not in off.expressions()
    assert TargetQueries.for_target(t).seasons == ()  # no settings given: no forecast
    fixed = TargetQueries.for_target(t, forecast=ForecastSettings(ahead_s=600.0, periods_s=[3600.0]))
    assert [(s.period_s, s.peak_window_s) for s in fixed.seasons] == [(3600.0, 960.0)]


@pytest.mark.parametrize("periods", [[1800.0], [DAY_S + 30], [6 * WEEK_S], [math.inf], []])
def test_forecast_periods_are_seasons_in_whole_minutes(periods: list[float]) -> None:
    with pytest.raises(ValidationError, match="periods"):
        ForecastSettings(periods_s=periods)


def test_forecast_settings_sort_their_periods_and_the_recommender_reads_them() -> None:
    assert ForecastSettings(periods_s=[WEEK_S, DAY_S, DAY_S]).periods_s == [DAY_S, WEEK_S]
    settings = RecommenderSettings.model_validate({"forecast": {"enabled": False, "max_growth": 1.5}})
    assert settings.forecast.enabled is False and settings.forecast.max_growth == 1.5


class _History:
    """A Prometheus whose forecast reads answer from a table, or fail."""

    def __init__(self, answers: dict[str, float | None], down: bool = False) -> None:
        self.answers, self.down = answers, down

    def instant(self, expr: str) -> list[tuple[float, float]]:
        if self.down:
            raise PrometheusUnavailable("timeout")
        for key, v in self.answers.items():
            if key in expr:
                return [] if v is None else [(0.0, v)]
        return []


def test_read_forecast_asks_prometheus_and_goes_without_when_it_cannot_say() -> None:
    t = TargetSettings(deployment="triton", namespace="ml", model="m")
    q = TargetQueries.for_target(t, forecast=ForecastSettings(periods_s=[DAY_S]))
    got = read_forecast(_History({"max_over_time": 800.0, "offset 86400s": 200.0, "quantile_over_time": 250.0}), q, 2.0)
    assert got == Forecast(pytest.approx(1000.0), DAY_S, 800.0, pytest.approx(1.25))
    assert read_forecast(_History({}), q, 2.0) is None  # no history yet
    assert read_forecast(_History({}, down=True), q, 2.0) is None
    assert read_forecast(_History({"max_over_time": 800.0}), TargetQueries.for_target(t), 2.0) is None  # off
