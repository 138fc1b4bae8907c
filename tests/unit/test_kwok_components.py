"""A KWOK cluster's component restarted with other flags: the command line it is started with (its
own, each flag replaced in place or appended) and the flags read back from a running command line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.stack.kwok.components import flag_values, with_flags

KCM = [
    "/c/bin/kube-controller-manager",
    "--node-monitor-period=25s",
    "--kubeconfig=/c/kubeconfig.yaml",
    "--secure-port=32762",
]


def test_a_flag_the_command_has_is_replaced_in_place_and_a_new_one_appended() -> None:
    argv = with_flags(KCM, {"node-monitor-period": "5s", "horizontal-pod-autoscaler-sync-period": "1s500ms"})
    assert argv == [
        "/c/bin/kube-controller-manager",
        "--node-monitor-period=5s",
        "--kubeconfig=/c/kubeconfig.yaml",
        "--secure-port=32762",
        "--horizontal-pod-autoscaler-sync-period=1s500ms",
    ]


def test_a_restart_of_a_restarted_command_keeps_one_copy_of_each_flag() -> None:
    """A replay at x10 then one at x5: the second restart starts from the first one's command line."""
    once = with_flags(KCM, {"horizontal-pod-autoscaler-sync-period": "1s500ms"})
    twice = with_flags(once, {"horizontal-pod-autoscaler-sync-period": "3s"})
    assert twice == [*KCM, "--horizontal-pod-autoscaler-sync-period=3s"]


names = st.sampled_from(["a", "b", "sync-period", "metric-resolution", "secure-port"])
values = st.text(alphabet="0123456789smh.,=/", max_size=8)


@given(
    before=st.lists(st.tuples(names, values), max_size=6),
    wanted=st.dictionaries(names, values, max_size=4),
)
def test_the_flags_read_back_are_the_old_ones_with_the_wanted_ones_set(
    before: list[tuple[str, str]], wanted: dict[str, str]
) -> None:
    argv = ["/bin/x", *(f"--{name}={value}" for name, value in before)]
    after = with_flags(argv, wanted)
    assert flag_values(after) == {**flag_values(argv), **wanted}
    assert after[0] == "/bin/x", "the same binary (the cluster's processes are found by it)"
    for name in wanted:
        assert sum(a.startswith(f"--{name}=") for a in after) == 1
