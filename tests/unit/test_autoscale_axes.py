"""Autoscaler settings as sweep axes: the cross product of the values, applied to every NodePool of the
file, each variant named by its values; bad values are refused with the flag that gave them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale.axes import INSTANCE_FAMILY_LABEL, AutoscalerAxes, autoscaler_variants
from services.cli import main


def pool(name: str = "general") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a-4"]},
                        {"key": INSTANCE_FAMILY_LABEL, "operator": "In", "values": ["old"]},
                    ]
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
            "limits": {"cpu": "256"},
        },
    }


def test_every_combination_of_the_axes_is_a_variant_named_by_its_values() -> None:
    axes = AutoscalerAxes(
        consolidation_policies=["WhenEmpty", "WhenEmptyOrUnderutilized"],
        consolidate_after=["0s", "1m"],
        cpu_limits=["64"],
    )
    variants = autoscaler_variants([pool("a"), pool("b")], axes)
    assert [dict(v.labels) for v in variants] == [
        {"autoscaler": "karpenter", "consolidation": policy, "consolidate_after": after, "limit_cpu": "64"}
        for policy in ("WhenEmpty", "WhenEmptyOrUnderutilized")
        for after in ("0s", "1m")
    ]
    last = variants[-1]
    assert [p["metadata"]["name"] for p in last.pools] == ["a", "b"]  # every pool of the file varies
    for body in last.pools:
        assert body["spec"]["disruption"] == {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "1m",
        }
        assert body["spec"]["limits"] == {"cpu": "64"}


def test_an_axis_without_values_keeps_the_files_setting_and_the_file_is_not_changed() -> None:
    original = pool()
    (variant,) = autoscaler_variants([original], AutoscalerAxes(instance_families=[["c", "m"]]))
    assert dict(variant.labels) == {"autoscaler": "karpenter", "families": "c,m"}
    spec = variant.pools[0]["spec"]
    assert spec["disruption"] == original["spec"]["disruption"]
    # the family requirement is replaced, the others kept
    assert spec["template"]["spec"]["requirements"] == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a-4"]},
        {"key": INSTANCE_FAMILY_LABEL, "operator": "In", "values": ["c", "m"]},
    ]
    assert original == pool()


def test_no_axes_give_the_file_as_one_variant() -> None:
    (variant,) = autoscaler_variants([pool()], AutoscalerAxes())
    assert variant.pools == (pool(),)
    assert variant.describe() == "autoscaler=karpenter"


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        (AutoscalerAxes(consolidation_policies=["Always"]), "--consolidation-policy 'Always'"),
        (AutoscalerAxes(consolidate_after=["soon"]), "--consolidate-after: 'soon' is not a duration"),
        (AutoscalerAxes(instance_families=[[""]]), "--instance-families takes"),
        (AutoscalerAxes(cpu_limits=["lots"]), "--limit-cpu 'lots'"),
    ],
)
def test_bad_values_name_the_flag(axes: AutoscalerAxes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        autoscaler_variants([pool()], axes)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--consolidation-policy", "WhenEmpty"], "add --autoscaler karpenter"),
        (["--autoscaler", "karpenter"], "needs --nodepool"),
        ([], "give the grid a fixed pool"),
    ],
)
def test_sweep_refuses_incomplete_autoscaler_arguments_before_any_replay(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["sweep", "--trace", "t.ktrace", "--kubeconfig", "k", "--out", str(tmp_path / "out")]
    assert main([*common, *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
