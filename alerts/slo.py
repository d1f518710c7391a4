"""The SLO group: which SLO each model has, as series that the burn-rate alerts and dashboards join on.

The SLO is data, not a constant baked into every alert: the group records one threshold and two
objectives per serving model, and the alerts divide by `1 - objective` of each model. So one rule
file serves any number of per-model SLOs, and a model that starts serving later gets its SLO at
once. The chart renders this group from its `slo` values with the clause patterns that
`slo_clauses()` commits (files/slo/clauses.yaml): the PromQL, the first-match order and the
thresholds the rules can measure are decided here only; the chart fills in each SLO's values
(templates/prometheusrule.yaml) and its schema refuses a threshold the rules do not record.
"""

from __future__ import annotations

from typing import Any

from tidescale.alerts.config import AlertsConfig
from tidescale.contracts import recorded as n
from tidescale.contracts.promql import count, escape_label_value, keep_labels, metric
from tidescale.contracts.slo import ResolvedSlo, le_value

GROUP_NAME = "tidescale.rules.slo"
# Placeholders of the committed clause patterns (templates/prometheusrule.yaml replaces the same).
VALUE, SELECTOR, NAME, LE = "__VALUE__", "__SELECTOR__", "__NAME__", "__LE__"
_NM = "namespace, model"


def _clause(with_le: bool) -> str:
    """One SLO's series: its value on every serving model its selector matches, labelled `slo`."""
    models = " or ".join(f"{series}{SELECTOR}" for series in
                         (metric("nv_inference_request_success"), count("tidescale_request_duration_seconds")))
    expr = f'label_replace({VALUE} * group by ({_NM}) ({models}), "slo", "{NAME}", "", "")'
    return f'label_replace({expr}, "le", "{LE}", "", "")' if with_le else expr


def slo_clauses(cfg: AlertsConfig) -> dict[str, Any]:
    """The patterns both renderers fill: per record, one clause per SLO joined first-match-wins."""
    keep = cfg.aggregation_labels
    return {
        "group": GROUP_NAME,
        "interval": cfg.evaluation_interval,
        # `or on (namespace, model)`: a model already matched by an earlier SLO is not matched again.
        "joiner": keep_labels(f"\nor on ({_NM})\n", keep),
        "records": [
            {"record": n.SLO_LATENCY_THRESHOLD, "value": "latency_threshold_s",
             "clause": keep_labels(_clause(with_le=True), keep)},
            {"record": n.SLO_LATENCY_OBJECTIVE, "value": "latency_objective",
             "clause": keep_labels(_clause(with_le=False), keep)},
            {"record": n.SLO_AVAILABILITY_OBJECTIVE, "value": "availability_objective",
             "clause": keep_labels(_clause(with_le=False), keep)},
        ],
    }


def selector(slo: ResolvedSlo) -> str:
    """`{model=~"…", namespace=~"…"}` for a group, nothing for the default SLO (every model)."""
    parts = [f'{label}=~"{escape_label_value(pattern)}"'
             for label, pattern in (("model", slo.model), ("namespace", slo.namespace)) if pattern]
    return "{" + ", ".join(parts) + "}" if parts else ""


def fill(clause: str, slo: ResolvedSlo, value_field: str) -> str:
    value = getattr(slo, value_field)
    # The chart's order: the user's patterns go in last, so nothing in them is taken for a placeholder.
    return (clause.replace(VALUE, le_value(value)).replace(NAME, slo.name)
            .replace(LE, le_value(slo.latency_threshold_s)).replace(SELECTOR, selector(slo)))


def slo_group(cfg: AlertsConfig) -> dict[str, Any]:
    spec = slo_clauses(cfg)
    slos = cfg.resolved_slos()
    rules = [{"record": r["record"], "expr": spec["joiner"].join(fill(r["clause"], s, r["value"]) for s in slos)}
             for r in spec["records"]]
    return {"name": GROUP_NAME, "interval": cfg.evaluation_interval, "rules": rules}
