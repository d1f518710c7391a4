"""The strict exposition parser: real fixtures parse, malformed lines name their line, fuzzing."""

from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from tidescale.devstack.fleet.exposition import ExpositionError, parse, render_family, render_sample


@pytest.mark.parametrize("path", [
    FIXTURES / "dcgm" / "metrics_grid_a100_vgpu_dcgm_exporter_4.x.txt",
    FIXTURES / "dcgm" / "metrics_h100_eks_gpu_operator_pod_mapped_excerpt.txt",
    FIXTURES / "triton" / "real-2.51" / "metrics_after_load.txt",
    FIXTURES / "triton" / "real-2.51" / "metrics_during_load.txt",
    FIXTURES / "triton" / "metrics_tensorrtllm_backend_readme_23.11.txt",
])
def test_real_fixtures_parse(path: object) -> None:
    families = parse(path.read_text())  # type: ignore[attr-defined]
    assert families
    assert all(f.samples or f.help for f in families.values())


def test_triton_summary_families_group_sum_count_and_nan() -> None:
    fams = parse((FIXTURES / "triton" / "real-2.51" / "metrics_after_load.txt").read_text())
    summary = fams["nv_inference_request_summary_us"]
    assert summary.type == "summary"
    names = {s.name for s in summary.samples}
    assert names == {"nv_inference_request_summary_us", "nv_inference_request_summary_us_sum",
                     "nv_inference_request_summary_us_count"}
    assert any(math.isnan(s.value) for s in summary.samples)  # Triton writes "Nan"


def test_labels_keep_order_and_unescape() -> None:
    fams = parse('# TYPE m gauge\nm{b="x\\"y",a="1\\\\2\\n"} 3.5 1700000000000\n')
    sample = fams["m"].samples[0]
    assert sample.label_keys == ("b", "a")
    assert sample.label_dict == {"b": 'x"y', "a": "1\\2\n"}
    assert sample.value == 3.5 and sample.timestamp_ms == 1700000000000


@pytest.mark.parametrize(("text", "line", "what"), [
    ("m 1\nm{a=\"1\" 2\n", 2, "expected"),
    ("# TYPE m gauge\nm 1\n\nm{a=1} 2\n", 4, "="),
    ("# TYPE m gauge\nm abc\n", 2, "not a number"),
    ("# TYPE m widget\n", 1, "unknown type"),
    ("m 1\n# TYPE m gauge\n", 2, "after its samples"),
    ("m{a=\"1\",a=\"2\"} 1\n", 1, "duplicate label"),
    ("1m 1\n", 1, "bad metric name"),
    ("m{a=\"\\q\"} 1\n", 1, "invalid escape"),
    ("m 1 2 3\n", 1, "value"),
    ("m{a=\"unterminated} 1\n", 1, "unterminated"),
])
def test_malformed_input_names_the_line(text: str, line: int, what: str) -> None:
    with pytest.raises(ExpositionError, match=rf"^line {line}: .*{what}"):
        parse(text)


label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
label_sets = st.dictionaries(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True), label_values,
                             max_size=4)


@settings(max_examples=150, deadline=None)
@given(name=st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True),
       rows=st.lists(st.tuples(label_sets, st.floats(allow_nan=False)), min_size=1, max_size=5),
       # a HELP text ending in CR cannot round-trip: the parser reads CRLF files, so a line's trailing
       # CR is a line ending (test_crlf_line_endings_parse pins that side)
       help_text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).filter(
           lambda h: not h.endswith("\r")))
def test_render_then_parse_round_trips(name: str, rows: list[tuple[dict[str, str], float]], help_text: str) -> None:
    text = render_family(name, "gauge", help_text, [(list(labels.items()), repr(v)) for labels, v in rows])
    fam = parse(text)[name]
    assert fam.type == "gauge"
    assert fam.help == help_text
    assert [(s.label_dict, s.value) for s in fam.samples] == [(labels, v) for labels, v in rows]


def test_crlf_line_endings_parse() -> None:
    fam = parse("# HELP a the help\r\n# TYPE a gauge\r\na{x=\"1\"} 2.5\r\n")["a"]
    assert fam.help == "the help" and fam.type == "gauge"
    assert [(s.label_dict, s.value) for s in fam.samples] == [({"x": "1"}, 2.5)]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_either_parses_or_raises_exposition_error(text: str) -> None:
    try:
        parse(text)
    except ExpositionError as exc:
        assert str(exc).startswith("line ")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(['m{a="1"} 1', "# HELP m h", "# TYPE m counter", 'm{a="', "m 1e3",
                                 "m NaN", "m{} 2", "# random comment", "", "m{a=\"x\",} 1", "m{ a=\"x\"} 1"]),
                max_size=8))
def test_line_soup_never_crashes(lines: list[str]) -> None:
    with contextlib.suppress(ExpositionError):  # any other exception fails the test
        parse("\n".join(lines))


def test_render_sample_without_labels() -> None:
    assert render_sample("up", [], "1") == "up 1"
