"""The autoscaler seam: Karpenter is the one provider, reached by its ``--autoscaler`` name; another
name is refused with the known ones and where Cluster Autoscaler would plug in."""

from __future__ import annotations

import pytest

from pipeline.model.errors import ConfigError
from pipeline.replay.autoscale.provider import PROVIDERS, AutoscalerProvider, autoscaler_provider
from services.cli import main


def test_karpenter_is_a_provider_whose_pool_and_process_timers_scale_with_the_speed() -> None:
    karpenter = autoscaler_provider("karpenter")
    assert isinstance(karpenter, AutoscalerProvider)
    assert karpenter.node_pool_label == "karpenter.sh/nodepool"
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"disruption": {"consolidateAfter": "1m"}},
    }
    scaled, settings = karpenter.scale_pool(pool, 6.0, "test")
    assert scaled["spec"]["disruption"]["consolidateAfter"] == "10s"
    assert settings[0].given == "1m"
    timers, timer_settings = karpenter.process_timers(10.0)
    assert timers == {
        "batch_idle_s": 0.1,
        "batch_max_s": 1.0,
        "polling_period_s": 1.0,
        "validation_delay_s": 1.5,
    }
    assert {s.name for s in timer_settings} >= {"Karpenter --batch-idle-duration"}


def test_an_unknown_autoscaler_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"'cluster-autoscaler' is not supported; use one of karpenter"):
        autoscaler_provider("cluster-autoscaler")


def test_the_commands_offer_exactly_the_providers(capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(PROVIDERS) == ["karpenter"]
    with pytest.raises(SystemExit):
        main(["replay", "--trace", "t", "--autoscaler", "cluster-autoscaler"])
    # the node autoscalers, and the HPA (pipeline.replay.hpa), which makes no nodes
    assert "invalid choice: 'cluster-autoscaler' (choose from 'karpenter', 'hpa')" in capsys.readouterr().err
