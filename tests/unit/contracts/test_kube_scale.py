"""The scale subresource's count, as direct mode reads it: the client's objects and raw answers alike."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import V1Scale, V1ScaleSpec

from tidescale.contracts.kubeapi import MAX_SCALE_REPLICAS, scale_spec_replicas


@pytest.mark.parametrize(("answer", "count"), [
    (V1Scale(spec=V1ScaleSpec(replicas=3)), 3),
    (V1Scale(spec=V1ScaleSpec()), 0),  # scaled to zero: the API leaves the count out
    ({"spec": {"replicas": 7}}, 7),
    ({"spec": {}}, 0),
    ({"spec": {"replicas": MAX_SCALE_REPLICAS}}, MAX_SCALE_REPLICAS),
])
def test_the_count_of_a_scale_read(answer: Any, count: int) -> None:
    assert scale_spec_replicas(answer) == count


@pytest.mark.parametrize(("answer", "problem"), [
    ({}, "no spec"),
    (None, "no spec"),
    ("<html>proxy error</html>", "no spec"),
    ({"spec": ["replicas", 3]}, "spec is not one"),
    ({"spec": {"replicas": "3"}}, "'3', not a count"),
    ({"spec": {"replicas": -1}}, "-1"),
    ({"spec": {"replicas": True}}, "True"),
    ({"spec": {"replicas": 2.0}}, "2.0"),
    ({"spec": {"replicas": MAX_SCALE_REPLICAS + 1}}, str(MAX_SCALE_REPLICAS + 1)),
    ({"spec": {"replicas": "x" * 10_000}}, "not a count"),
])
def test_an_answer_that_is_not_a_count_is_refused_with_what_it_read(answer: Any, problem: str) -> None:
    with pytest.raises(ValueError, match="scale subresource") as raised:
        scale_spec_replicas(answer)
    assert problem in str(raised.value) and len(str(raised.value)) < 200


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20)


@given(st.one_of(JSON, st.fixed_dictionaries({"spec": JSON}), st.fixed_dictionaries({"spec": st.fixed_dictionaries(
    {"replicas": JSON})})))
def test_any_answer_gives_a_count_the_api_allows_or_a_value_error(answer: Any) -> None:
    try:
        count = scale_spec_replicas(answer)
    except ValueError:
        return
    assert type(count) is int and 0 <= count <= MAX_SCALE_REPLICAS
    assert isinstance(answer, dict) and isinstance(answer["spec"], dict)  # only a spec is read as a count
