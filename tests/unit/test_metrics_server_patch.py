"""The stack's metrics-server patch: its one validation floor lowered, applied exactly or the build
stops saying which text it did not find (a new metrics-server version must be looked at)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.model.errors import StackError
from pipeline.stack.go_module import METRICS_SERVER_PATCHES, METRICS_SERVER_RESOLUTION_FLOOR_S, patch_source

# the lines of v0.9.0's cmd/metrics-server/app/options/options.go the patch touches, as upstream has them
UPSTREAM_VALIDATE = """func (o *Options) validate() []error {
	errors := []error{}
	if o.MetricResolution < 10*time.Second {
		errors = append(errors, fmt.Errorf("metric-resolution should be a time duration at least 10s, but"))
	}
	if o.MetricResolution*9/10 < o.KubeletClient.KubeletRequestTimeout {
		errors = append(errors, fmt.Errorf("metric-resolution should be larger than kubelet-request-timeout"))
	}
	return errors
}
"""
OPTIONS = "cmd/metrics-server/app/options/options.go"


def _module(tmp_path: Path, text: str) -> Path:
    (tmp_path / OPTIONS).parent.mkdir(parents=True)
    (tmp_path / OPTIONS).write_text(text)
    return tmp_path


def test_the_patch_lowers_the_resolution_floor_and_keeps_the_timeout_rule(tmp_path: Path) -> None:
    source = _module(tmp_path, UPSTREAM_VALIDATE)
    patch_source(source, METRICS_SERVER_PATCHES, "metrics-server v0.9.0")
    patched = (source / OPTIONS).read_text()
    assert f"if o.MetricResolution < {METRICS_SERVER_RESOLUTION_FLOOR_S}*time.Second {{" in patched
    assert "10*time.Second" not in patched
    assert f"at least {METRICS_SERVER_RESOLUTION_FLOOR_S}s," in patched
    assert "if o.MetricResolution*9/10 < o.KubeletClient.KubeletRequestTimeout {" in patched


def test_a_version_without_the_upstream_text_stops_the_build_naming_it(tmp_path: Path) -> None:
    source = _module(tmp_path, UPSTREAM_VALIDATE.replace("10*time.Second", "5*time.Second"))
    with pytest.raises(
        StackError, match=r"cannot patch metrics-server v9: expected 1 .* in cmd/metrics-server"
    ):
        patch_source(source, METRICS_SERVER_PATCHES, "metrics-server v9")
