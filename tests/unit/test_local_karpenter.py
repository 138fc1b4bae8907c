"""Which Karpenter a replay restarts at its speed: only a local stack's, found by the kubeconfig."""

from __future__ import annotations

from pathlib import Path

from services.local_karpenter import LocalKarpenter


def test_inside_a_cluster_the_timers_are_reported_as_the_clusters_own_not_a_local_stacks(
    tmp_path: Path,
) -> None:
    """A Simulation's Job has no kubeconfig: its report must not send the reader to a local stack's
    directory (a path in the Job's container) nor to a kubeconfig it does not have."""
    settings = LocalKarpenter(stack_dir=tmp_path, kubeconfig=None).restart_at(10.0)
    timers = [s for s in settings if s.name.startswith("Karpenter --batch")]
    assert timers, settings
    for setting in timers:
        assert (setting.given, setting.applied) == ("as deployed", "as deployed")
        assert "the cluster's own Karpenter runs as deployed" in setting.note
        assert str(tmp_path) not in setting.note


def test_beside_no_local_karpenter_the_note_names_the_stack_looked_in(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    settings = LocalKarpenter(stack_dir=tmp_path, kubeconfig=kubeconfig).restart_at(10.0)
    batch = next(s for s in settings if s.name == "Karpenter --batch-idle-duration")
    assert batch.note.startswith(f"not scaled: no Karpenter of the local stack in {tmp_path.resolve()}")
