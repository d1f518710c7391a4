"""Building PromQL safely: label values that reach a query are escaped, never pasted raw."""

from __future__ import annotations

import re

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def escape_label_value(value: str) -> str:
    """A PromQL double-quoted string literal body: backslash, quote and newlines escaped."""
    return (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )


def matcher(name: str, value: str, op: str = "=") -> str:
    if not _LABEL_NAME.match(name):
        raise ValueError(f"invalid label name {name!r}")
    if op not in ("=", "!=", "=~", "!~"):
        raise ValueError(f"invalid matcher operator {op!r}")
    return f'{name}{op}"{escape_label_value(value)}"'


def selector(metric: str, **labels: str) -> str:
    """`metric{a="x",b="y"}` with every value escaped."""
    if not _LABEL_NAME.match(metric.replace(":", "_")):
        raise ValueError(f"invalid metric name {metric!r}")
    if not labels:
        return metric
    return metric + "{" + ",".join(matcher(k, v) for k, v in labels.items()) + "}"


def regex_escape(value: str) -> str:
    """Escape a literal for use inside a `=~` matcher (RE2), then as a PromQL string."""
    return re.sub(r"([.*+?^${}()|\[\]\\])", r"\\\1", value)


# --- reading PromQL --------------------------------------------------------------------------------

_CHILD_ATTRS = ("lhs", "rhs", "expr", "args", "param", "vector_selector")
# Grafana and prometheus-adapter template variables, replaced by parseable stand-ins.
_TEMPLATE_SUBS = (
    (re.compile(r"\$__rate_interval|\$__interval|\$__range|\$\{__\w+\}"), "5m"),
    (re.compile(r"<<\s*\.Series\s*>>"), "__series__"),
    (re.compile(r"<<\s*\.LabelMatchers\s*>>"), 'namespace="x"'),
    (re.compile(r"<<\s*\.GroupBy\s*>>"), "namespace"),
    (re.compile(r"\[\[\s*\w+\s*\]\]|\$\{\w+(:\w+)?\}|\$\w+"), "x"),
)


def substitute_templates(expr: str) -> str:
    """Replace Grafana (`$__rate_interval`, `$model`) and adapter (`<<.Series>>`) templates."""
    for pattern, repl in _TEMPLATE_SUBS:
        expr = pattern.sub(repl, expr)
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric name a PromQL expression selects (templates substituted first)."""
    import promql_parser

    names: set[str] = set()

    def walk(node: object) -> None:
        if type(node).__name__ == "VectorSelector":
            name = getattr(node, "name", None)
            if name:
                names.add(name)
            for m in getattr(getattr(node, "matchers", None), "matchers", []) or []:
                if m.name == "__name__":
                    names.add(m.value)
            return
        for attr in _CHILD_ATTRS:
            child = getattr(node, attr, None)
            if isinstance(child, list):
                for c in child:
                    walk(c)
            elif child is not None and not isinstance(child, str | int | float):
                walk(child)

    walk(promql_parser.parse(substitute_templates(expr)))
    names.discard("__series__")
    return names
