"""The latency SLO, once: every component that needs it reads it from here.

The exporter's histogram places a bucket boundary exactly on each threshold, the alert rules
count requests below `le="<threshold>"`, the recommender sizes for the P99 target and the chart
ships the same defaults. A threshold that is not a bucket boundary cannot be measured (the rules
would interpolate), so `threshold_problems` is checked wherever thresholds and buckets meet.

Per model or model group, an SLO may differ from the default (`SloGroup`, first match wins).
`resolve_slos` fills each group from the default and `slo_of` finds a model's: the alert rules'
SLO group (alerts/slo.py) and the recommender's per-target threshold both come from them, and
`SloValues` reads the chart's `slo` values as they are, so no template resolves an SLO.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from prometheus_client.utils import floatToGoString
from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from tidescale.contracts.errors import UsageError
from tidescale.contracts.settings import SettingsModel

# The P99 latency a model must stay under (seconds): alerts page on its burn, the recommender
# scales for it, dashboards draw it.
SLO_LATENCY_THRESHOLD_S: Final = 0.5
# The default SLO's objectives: the share of requests under the threshold, and the share served.
LATENCY_OBJECTIVE: Final = 0.99
AVAILABILITY_OBJECTIVE: Final = 0.999
# Histogram boundaries the burn-rate rules may select (`le`): SLO_LATENCY_THRESHOLD_S and the usual per-model
# alternatives. Per-model thresholds must be one of these.
SLO_THRESHOLDS_S: Final[tuple[float, ...]] = (0.1, 0.25, 0.5, 1.0)
# The window of the recorded P50/P95/P99 (`namespace_model:…:p99`).
QUANTILE_WINDOW: Final = "5m"
QUANTILE_WINDOW_S: Final = 300.0


def threshold_problems(thresholds: Iterable[float], boundaries: Iterable[float]) -> list[str]:
    """One message per SLO threshold that is not exactly a histogram bucket boundary."""
    bounds = {float(b) for b in boundaries}
    listed = ", ".join(f"{b:g}" for b in sorted(bounds))
    return [f"SLO threshold {t:g}s is not a histogram bucket boundary (boundaries: {listed})"
            for t in sorted(set(thresholds)) if float(t) not in bounds]


assert not threshold_problems([SLO_LATENCY_THRESHOLD_S],
                              SLO_THRESHOLDS_S), "the SLO must be one of the bucket boundaries"

_SLO_NAME = re.compile(r"^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$")
# The name of the SLO that models matched by no group get (the `slo` label of its series).
DEFAULT_SLO_NAME = "default"


def check_slo_threshold(threshold_s: float, what: str = "SLO P99") -> float:
    """*threshold_s*, if it is a P99 SLO anything can size or judge at. Flags parse `nan` and `inf` as
    floats, and a check of `> 0` alone lets both through (to a rendered manifest, to a capacity
    that takes the fastest row whatever its P99), so every command checks here; *what* names the
    flag or field in the message."""
    if not (math.isfinite(threshold_s) and threshold_s > 0):
        raise UsageError(f"{what} must be a finite number > 0 (seconds), got {threshold_s}")
    return threshold_s


def le_value(threshold_s: float) -> str:
    """The `le` label value prometheus_client writes for a bucket boundary (1.0 → "1.0")."""
    return str(floatToGoString(threshold_s))


def check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a valid regular expression: {exc}") from None
    return value


Regex = Annotated[str, AfterValidator(check_regex)]


class SloGroup(SettingsModel):
    """The SLO of the models whose name (and namespace) match: one model or a group of them.

    Groups are tried in order and the first match wins; a field left out takes the default SLO's
    value. The rules match in PromQL (RE2, fully anchored), so a model that appears later is
    covered without a redeploy; `slo_of` matches the same way for one model."""

    name: str
    model: Regex
    namespace: Regex = ""
    latency_threshold_s: float | None = Field(None, gt=0)
    latency_objective: float | None = Field(None, gt=0, lt=1)
    availability_objective: float | None = Field(None, gt=0, lt=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SLO_NAME.match(v) or v == DEFAULT_SLO_NAME:
            raise ValueError(f"SLO name {v!r} must be lower-case letters, digits, '.', '_' or '-' "
                             f"(at most 63) and not {DEFAULT_SLO_NAME!r}")
        return v


@dataclass(frozen=True)
class ResolvedSlo:
    """One SLO with every value set; empty `model`/`namespace` patterns match every model."""

    name: str
    model: str
    namespace: str
    latency_threshold_s: float
    latency_objective: float
    availability_objective: float

    def matches(self, namespace: str, model: str) -> bool:
        """Whether this SLO covers *model* in *namespace*, anchored as PromQL's `=~` is."""
        return all(not pattern or re.fullmatch(pattern, value) is not None
                   for pattern, value in ((self.model, model), (self.namespace, namespace)))


def resolve_slos(groups: Sequence[SloGroup], default: ResolvedSlo) -> list[ResolvedSlo]:
    """Each group with the *default*'s values filled in where it leaves one out, then the default."""
    out = [ResolvedSlo(
        g.name, g.model, g.namespace,
        g.latency_threshold_s if g.latency_threshold_s is not None else default.latency_threshold_s,
        g.latency_objective if g.latency_objective is not None else default.latency_objective,
        g.availability_objective if g.availability_objective is not None else default.availability_objective,
    ) for g in groups]
    return [*out, default]


def slo_of(resolved: Sequence[ResolvedSlo], namespace: str, model: str) -> ResolvedSlo:
    """The first SLO that covers *model* in *namespace* (the default covers every model)."""
    return next(s for s in resolved if s.matches(namespace, model))


# What the chart's schema says of a threshold value (values.schema.json is generated from SloValues).
_THRESHOLD_HELP = ("seconds; one of the histogram bucket boundaries that the exporter writes and the recorded "
                   "slow ratios count (tidescale.contracts.slo.SLO_THRESHOLDS_S)")
# A pattern the rules match with: long enough for any model list, short enough for a PromQL matcher.
_PATTERN_MAX = 1024


def _one_of_the_thresholds(value: float) -> float:
    if value not in SLO_THRESHOLDS_S:
        raise ValueError(f"SLO threshold {value:g}s is not one of the histogram bucket boundaries "
                         f"{', '.join(f'{t:g}' for t in SLO_THRESHOLDS_S)} (seconds)")
    return value


def _every_field_required(schema: dict[str, Any]) -> None:
    """The chart's values.yaml sets every field of the default SLO, so its schema requires them: a
    value deleted with `null` is refused by `helm install` instead of rendering an empty threshold."""
    schema["required"] = list(schema.get("properties", {}))


Threshold = Annotated[float, AfterValidator(_one_of_the_thresholds),
                      Field(json_schema_extra={"enum": list(SLO_THRESHOLDS_S), "description": _THRESHOLD_HELP})]
Objective = Annotated[float, Field(gt=0, lt=1)]
NameOfSlo = Annotated[str, Field(json_schema_extra={"pattern": _SLO_NAME.pattern,
                                                    "not": {"const": DEFAULT_SLO_NAME}})]


class _Latency(SettingsModel):
    """A group's latency SLO: a field left out is the default SLO's."""

    thresholdSeconds: Threshold | None = None
    objective: Objective | None = None


class _Availability(SettingsModel):
    objective: Objective | None = None


class _DefaultLatency(SettingsModel):
    model_config = ConfigDict(json_schema_extra=_every_field_required)
    thresholdSeconds: Threshold = SLO_LATENCY_THRESHOLD_S
    objective: Objective = LATENCY_OBJECTIVE


class _DefaultAvailability(SettingsModel):
    model_config = ConfigDict(json_schema_extra=_every_field_required)
    objective: Objective = AVAILABILITY_OBJECTIVE


class _ModelSlo(SettingsModel):
    name: NameOfSlo
    model: Annotated[Regex, Field(min_length=1, max_length=_PATTERN_MAX)]
    namespace: Annotated[Regex, Field(max_length=_PATTERN_MAX)] = ""
    latency: _Latency = Field(default_factory=lambda: _Latency())
    availability: _Availability = Field(default_factory=lambda: _Availability())


class SloValues(SettingsModel):
    """The chart's `slo` values, as the chart holds them (camelCase), read by the same functions.

    Its JSON schema is the `slo` part of the chart's values.schema.json (tidescale.devstack.chart),
    so `helm install` refuses what the exporter and the recommender would refuse."""

    model_config = ConfigDict(json_schema_extra=_every_field_required)
    latency: _DefaultLatency = Field(default_factory=lambda: _DefaultLatency())
    availability: _DefaultAvailability = Field(default_factory=lambda: _DefaultAvailability())
    models: list[_ModelSlo] = Field(default_factory=list)

    @model_validator(mode="after")
    def _groups_are_valid(self) -> SloValues:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"SLO names must be unique, got {names}")
        self.resolved()  # each group as SloGroup validates it (its name above all)
        return self

    def resolved(self) -> list[ResolvedSlo]:
        default = ResolvedSlo(DEFAULT_SLO_NAME, "", "", self.latency.thresholdSeconds, self.latency.objective,
                              self.availability.objective)
        groups = [SloGroup(name=m.name, model=m.model, namespace=m.namespace,
                           latency_threshold_s=m.latency.thresholdSeconds, latency_objective=m.latency.objective,
                           availability_objective=m.availability.objective) for m in self.models]
        return resolve_slos(groups, default)
