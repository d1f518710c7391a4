"""The metric catalog: every family tidescale reads or writes, declared once.

Rules, dashboards, adapter config and exporters take metric names from here
(`catalog.TRITON_REQUEST_SUCCESS.name`, or `catalog.get("...")`), and a test
fails when PromQL anywhere in the repository names a metric that is neither
in the catalog nor produced by a recording rule.
"""

from __future__ import annotations

from tidescale.contracts.catalog.families import ALL_FAMILIES, DCGM_RENAMES
from tidescale.contracts.catalog.model import DcgmRename, MetricFamily, MetricType, Source

_BY_NAME: dict[str, MetricFamily] = {f.name: f for f in ALL_FAMILIES}
_DCGM_RENAME: dict[str, DcgmRename] = {n: r for r in DCGM_RENAMES for n in (r.legacy, r.current)}


def get(name: str) -> MetricFamily:
    """Return the family called *name*; KeyError names the unknown metric."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in the tidescale catalog") from None


def dcgm_rename(name: str) -> DcgmRename | None:
    """The 4.x/4.9 pair a dcgm-exporter field belongs to (by either name), None when 4.9 kept the name."""
    get(name)
    return _DCGM_RENAME.get(name)


def names() -> frozenset[str]:
    return frozenset(_BY_NAME)


def families(source: Source | None = None) -> list[MetricFamily]:
    return [f for f in ALL_FAMILIES if source is None or f.source == source]


def series_names(family: MetricFamily) -> set[str]:
    """Names of the series a family exposes (histograms add _bucket/_sum/_count)."""
    if family.type == "histogram":
        return {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
    if family.type == "summary":
        return {family.name, f"{family.name}_sum", f"{family.name}_count"}
    if family.type == "counter" and family.name.endswith("_total"):
        return {family.name}
    return {family.name}


def all_series_names() -> frozenset[str]:
    out: set[str] = set()
    for fam in ALL_FAMILIES:
        out |= series_names(fam)
    return frozenset(out)


__all__ = [
    "ALL_FAMILIES",
    "DCGM_RENAMES",
    "DcgmRename",
    "MetricFamily",
    "MetricType",
    "Source",
    "all_series_names",
    "dcgm_rename",
    "families",
    "get",
    "names",
    "series_names",
]
