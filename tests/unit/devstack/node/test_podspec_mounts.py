"""The simulated kubelet's volume mounts: subPath and subPathExpr as the kubelet resolves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.devstack.node.podspec import PodSpecError, container_mounts

ENV = {"POD_NAMESPACE": "prod", "POD_NAME": "triton-7d9f-abcde"}


def _mount(tmp_path: Path, **mount: str) -> Path:
    container = {"volumeMounts": [{"name": "traces", "mountPath": "/traces", **mount}]}
    [found] = container_mounts(container, {"traces": tmp_path}, ENV)
    return found.source


def test_sub_path_expr_is_expanded_from_the_container_env_and_made_with_the_volume_roots_mode(
        tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    source = _mount(tmp_path, subPathExpr="$(POD_NAMESPACE)_$(POD_NAME)")
    assert source == tmp_path / "prod_triton-7d9f-abcde"
    assert source.is_dir() and source.stat().st_mode & 0o7777 == 0o777
    tmp_path.chmod(0o755)
    assert _mount(tmp_path, subPathExpr="$(POD_NAME)-b").stat().st_mode & 0o7777 == 0o755


def test_plain_sub_path_still_works(tmp_path: Path) -> None:
    assert _mount(tmp_path, subPath="a/b") == tmp_path / "a" / "b"


@pytest.mark.parametrize(("mount", "problem"), [
    ({"subPathExpr": "$(NOT_SET)"}, "variable the container does not have"),
    ({"subPathExpr": "/$(POD_NAME)"}, "relative path inside the volume"),
    ({"subPathExpr": "../$(POD_NAME)"}, "relative path inside the volume"),
    ({"subPath": "a", "subPathExpr": "$(POD_NAME)"}, "mutually exclusive"),
])
def test_a_sub_path_the_kubelet_refuses_is_a_container_config_error(tmp_path: Path, mount: dict[str, str],
                                                                    problem: str) -> None:
    with pytest.raises(PodSpecError, match=problem):
        _mount(tmp_path, **mount)
