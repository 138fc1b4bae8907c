"""The SKEL engine on single objects: SimKube's engine cases (``sk-skel/src/tests/engine_test.rs``, MIT),
ported to kubetape's API (statements go through the parser where SimKube builds its AST by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.validate.skel import SkelRuntimeError
from pipeline.validate.skel.ast import WILDCARD, Check, Literal, Op, Path, ResourceTest, VarTest
from pipeline.validate.skel.engine import Found, compare, rhs_values, selected
from pipeline.validate.skel.parse import parse_skel
from pipeline.validate.skel.program import parse_program

CONTAINERS = ("spec", "template", "spec", "containers")


@pytest.fixture
def obj() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"foo": "bar"}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "container1"},
                        {"image": "asdf:latest"},  # huh, where'd the name go?
                        {"name": "container2"},
                    ],
                },
            },
        },
    }


def _edit(program: str, obj: dict[str, Any], ts: int = 1234, start: int = 1000) -> dict[str, Any] | None:
    result, _changed = parse_program(program).edit(obj, ts, start)
    return result


def _selector(text: str) -> Any:
    (command,) = parse_skel(f"delete({text});")
    return command.selector


def _containers(obj: dict[str, Any] | None) -> Any:
    assert obj is not None
    return obj["spec"]["template"]["spec"]["containers"]


def test_process_event_deleted_obj(obj: dict[str, Any]) -> None:
    assert _edit("delete(*);", obj) is None


def test_process_modify_event_obj_multi_val(obj: dict[str, Any]) -> None:
    program = (
        "modify($x := spec.template.spec.containers[*] | exists($x.name), "
        "spec.template.spec.containers[0].name = $x.name);"
    )
    with pytest.raises(SkelRuntimeError, match=r"line 1: \$x\.name has 2 values.*exactly one"):
        _edit(program, obj)


def test_process_modify_event_obj_add(obj: dict[str, Any]) -> None:
    result = _edit('modify(spec.template.spec.containers[1].name = "foo");', obj)
    assert _containers(result) == [
        {"name": "container1"},
        {"name": "foo", "image": "asdf:latest"},
        {"name": "container2"},
    ]


def test_process_modify_event_obj_replace(obj: dict[str, Any]) -> None:
    result = _edit('modify($x := spec.template.spec.containers[*] | exists($x.name), $x.name = "foo");', obj)
    assert _containers(result) == [{"name": "foo"}, {"image": "asdf:latest"}, {"name": "foo"}]


def test_process_remove_event_obj(obj: dict[str, Any]) -> None:
    result = _edit("remove($x := spec.template.spec.containers[*] | exists($x.name), $x);", obj)
    assert _containers(result) == [{"image": "asdf:latest"}]
    assert result is not None
    assert result["metadata"] == {"labels": {"foo": "bar"}}


def test_trace_matches_all(obj: dict[str, Any]) -> None:
    assert selected(obj, _selector("*"), 1234, 0) == {}


@pytest.mark.parametrize(("op", "expected"), [("==", False), ("!=", True)])
def test_trace_matches_list(obj: dict[str, Any], op: str, expected: bool) -> None:
    selector = _selector(f'@t {op} 1235 && metadata.labels.foo == "bar"')
    assert (selected(obj, selector, 1234, 0) is not None) is expected


@pytest.mark.parametrize(
    ("op", "n1", "n2", "expected"),
    [
        (Op.EQ, 1, 1, True), (Op.EQ, 1, 2, False), (Op.NE, 1, 1, False), (Op.NE, 1, 2, True),
        (Op.GT, 1, 1, False), (Op.GT, 1, 2, False), (Op.GT, 2, 1, True),
        (Op.LT, 1, 1, False), (Op.LT, 1, 2, True), (Op.LT, 2, 1, False),
        (Op.GE, 1, 1, True), (Op.GE, 1, 2, False), (Op.GE, 2, 1, True),
        (Op.LE, 1, 1, True), (Op.LE, 1, 2, True), (Op.LE, 2, 1, False),
    ],
)  # fmt: skip
def test_time_conditional_matches(op: Op, n1: int, n2: int, expected: bool) -> None:
    assert compare(n1, op, n2) is expected
    assert (selected({}, _selector(f"@t {op.value} {n2}"), n1, 0) is not None) is expected


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [("==", "bar", True), ("!=", "bar", False), ("==", "baz", False), ("!=", "baz", True)],
)
def test_resource_conditional_matches(obj: dict[str, Any], op: str, value: str, expected: bool) -> None:
    bindings = selected(obj, _selector(f'metadata.labels.foo {op} "{value}"'), 0, 0)
    assert (bindings is not None) is expected
    assert not bindings


@pytest.mark.parametrize(("test", "expected"), [("exists", True), ("!exists", False)])
def test_resource_conditional_matches_existence(obj: dict[str, Any], test: str, expected: bool) -> None:
    bindings = selected(obj, _selector(f"{test}(metadata.labels.foo)"), 0, 0)
    assert (bindings is not None) is expected
    assert not bindings


@pytest.mark.parametrize(
    ("op", "value", "bound"),
    [
        ("==", "container1", [0]),
        ("!=", "container1", [2]),  # the nameless container never matches a test on its name
        ("==", "container3", []),
        ("!=", "container3", [0, 2]),
    ],
)
def test_resource_conditional_matches_variable(
    obj: dict[str, Any], op: str, value: str, bound: list[int]
) -> None:
    selector = _selector(f'$x := spec.template.spec.containers[*] | $x.name {op} "{value}"')
    bindings = selected(obj, selector, 0, 0)
    if not bound:
        assert bindings is None
        return
    assert bindings == {"$x": [((*CONTAINERS, i), _containers(obj)[i]) for i in bound]}


@pytest.mark.parametrize(("test", "expected"), [("exists", True), ("!exists", False)])
def test_resource_conditional_matches_variable_existence(
    obj: dict[str, Any], test: str, expected: bool
) -> None:
    bindings = selected(obj, _selector(f"$x := spec.template.spec.containers[*] | {test}($x.name)"), 0, 0)
    if expected:
        assert bindings == {"$x": [((*CONTAINERS, i), _containers(obj)[i]) for i in (0, 2)]}
    else:
        assert bindings is None


@pytest.mark.parametrize(
    ("var_value", "op", "expected"),
    [
        ("asdf:latest", Op.EQ, True),
        ("asdf:latest", Op.NE, False),
        ("asdf:latest2", Op.EQ, False),
        ("asdf:latest2", Op.NE, True),
    ],
)
def test_resource_conditional_matches_other_variable(
    obj: dict[str, Any], var_value: str, op: Op, expected: bool
) -> None:
    # $x bound beforehand (by an earlier condition), as SimKube's case builds its context by hand
    x_bound: Found = [(("foo", "bar"), {"qwerty": "whatever"}), (("baz", "buzz"), {"value": var_value})]
    test = VarTest(
        "$y",
        Path(None, (*CONTAINERS, WILDCARD), "spec.template.spec.containers[*]"),
        ResourceTest(
            Check.COMPARE, Path("$y", ("image",), "$y.image"), op, Path("$x", ("value",), "$x.value")
        ),
    )
    assert (selected(obj, (test,), 0, 0, {"$x": x_bound}) is not None) is expected


@pytest.mark.parametrize(
    ("rhs", "expected"),
    [
        (Literal(42), [42]),
        (Path(None, ("metadata", "labels", "foo"), "metadata.labels.foo"), ["bar"]),
        (Path("$x", ("name",), "$x.name"), ["container1", "container2"]),
    ],
)
def test_rhs_to_values(obj: dict[str, Any], rhs: Any, expected: list[Any]) -> None:
    bindings = selected(obj, _selector("$x := spec.template.spec.containers[*] | exists($x.name)"), 0, 0)
    assert bindings is not None
    assert rhs_values(obj, rhs, bindings) == expected


# ---- beyond the upstream cases ----------------------------------------------------------------------
def test_the_input_object_is_never_modified(obj: dict[str, Any]) -> None:
    before = repr(obj)
    result, changed = parse_program("remove(spec); modify(metadata.labels.foo = 1);").edit(obj, 0, 0)
    assert changed
    assert repr(obj) == before
    assert result == {"metadata": {"labels": {"foo": 1}}}


def test_an_unmatched_program_returns_the_object_itself(obj: dict[str, Any]) -> None:
    result, changed = parse_program('remove(metadata.labels.foo == "nope", spec);').edit(obj, 0, 0)
    assert result is obj
    assert not changed


def test_statements_apply_in_order_to_the_result_of_the_previous(obj: dict[str, Any]) -> None:
    program = 'modify(metadata.labels.foo = "qux"); delete(metadata.labels.foo == "qux");'
    assert _edit(program, obj) is None


def test_relative_and_absolute_times(obj: dict[str, Any]) -> None:
    assert _edit("delete(@t >= 5m);", obj, ts=1000 + 299, start=1000) is obj
    assert _edit("delete(@t >= 5m);", obj, ts=1000 + 300, start=1000) is None
    assert _edit("delete(@t < 1300);", obj, ts=1299) is None


def test_modify_creates_missing_maps_and_copies_values_from_paths(obj: dict[str, Any]) -> None:
    result = _edit('modify(metadata.annotations."simkube.io/from" = metadata.labels.foo);', obj)
    assert result is not None
    assert result["metadata"]["annotations"] == {"simkube.io/from": "bar"}


def test_variables_compare_across_lists() -> None:
    pod = {
        "spec": {
            "volumes": [{"name": "s", "secret": {}}, {"name": "e", "emptyDir": {}}],
            "containers": [{"volumeMounts": [{"name": "s"}, {"name": "e"}]}],
        }
    }
    program = (
        "remove($x := spec.volumes[*] | exists($x.secret) && "
        "$y := spec.containers[*].volumeMounts[*] | $y.name == $x.name, $y);"
    )
    result = _edit(program, pod)
    assert result is not None
    assert result["spec"]["containers"] == [{"volumeMounts": [{"name": "e"}]}]


def test_booleans_are_not_numbers() -> None:
    assert not compare(True, Op.EQ, 1)
    assert compare(True, Op.NE, 1)
    assert not compare("10", Op.GT, 9)
    assert compare("b", Op.GT, "a")


@given(st.lists(st.integers(0, 5), max_size=8), st.integers(0, 5))
def test_removing_list_elements_by_value_keeps_the_others_in_order(items: list[int], drop: int) -> None:
    doc = {"spec": {"items": [{"v": v} for v in items]}}
    result = _edit(f"remove($x := spec.items[*] | $x.v == {drop}, $x);", doc)
    assert result is not None
    assert result["spec"]["items"] == [{"v": v} for v in items if v != drop]
