"""SKEL parsing: SimKube's parser cases (``sk-skel/src/tests/parser_test.rs``, MIT, ported), the error
positions kubetape reports, and the variable rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.validate.skel import SkelSyntaxError, parse_skel
from pipeline.validate.skel.ast import (
    WILDCARD,
    Action,
    Check,
    Literal,
    Op,
    Path,
    ResourceTest,
    TimeTest,
    VarTest,
)
from pipeline.validate.skel.generate import skel_path
from tests.data import SIMKUBE_TRACES

# ---- upstream: test_skel_should_parse / test_skel_should_not_parse --------------------------------
SHOULD_PARSE = [
    "# foo bar",
    "remove(status);",
    "remove(*, spec.template.spec);",
    'remove(spec.template.spec.nodeSelector."simkube.dev/foo" == "bar", metadata.labels);',
    """remove(@t >= 12345
        && @t <= 45677
        && spec.template.spec.nodeSelector."simkube.dev/foo" == "bar",
      metadata);""",
    "remove(!exists(spec.template.tolerations), metadata.labels);",
    "remove(@t == 1 && exists(spec.template.tolerations), metadata.labels);",
    "remove(exists(spec.template.spec.containers[*].env[*].valueFrom.secretKeyRef), "
    'metadata.labels."simkube.io/dev");',
    "remove($x := spec.template.spec.containers[*].env[*] | exists($x.valueFrom.secretKeyRef), $x);",
    "remove($x := spec.template.spec.containers[*].env[*] | !exists($x.valueFrom.secretKeyRef), $x);",
    """remove(@t >= 10m
        && spec.template.spec.nodeSelector."simkube.dev/foo" == "bar"
        && $p := spec.template.spec.tolerations[*] | $p.key <= 1234,
      $p.value);""",
    """remove($x := spec.template.spec.volumes[*] | exists($x.secret)
        && $y := spec.template.spec.containers[*].volumeMounts[*] | $y.name == $x.name,
      $y);""",
    """modify(@t >= 10m && spec.template.spec.nodeSelector."simkube.dev/foo" == "bar",
      spec.template.spec.nodeSelector."simkube.dev/foo" = "baz");""",
    'delete(@t >= 10m && spec.template.spec.nodeSelector."simkube.dev/foo" == "bar");',
]

# Each invalid program with where kubetape reports the problem (line, column) and part of the message.
SHOULD_NOT_PARSE = [
    ("remove(status", 1, 14, "unexpected end of program; expected ')'"),
    ('remove(* && status == "foo", metadata);', 1, 10, "found '&&'; expected ')' or ','"),
    ("remove(@status);", 1, 8, "unexpected '@'"),
    ("remove(sta%tus);", 1, 11, "unexpected '%'"),
    (
        "remove($x := spec.template.spec.volumes[*] | exists($x.secret), spec.template.spec.$x);",
        1,
        83,
        "unexpected '.'; expected ')'",
    ),
    (
        """remove($x := spec.template.spec.volumes[*] | exists($x.secret)
        && $y := spec.template.spec.containers[*].volumeMounts[*] | $y.name == /foo/bar/baz,
      $y);""",
        2,
        80,
        "unexpected '/'",
    ),
    (
        """remove($x := spec.template.spec.volumes[*] | exists($x.secret)
        && $y := spec.template.spec.containers[*].volumeMounts[*] | $y.name == "asdf",
      $x.$y);""",
        3,
        9,
        "unexpected '.'; expected ')'",
    ),
]


@pytest.mark.parametrize("program", SHOULD_PARSE)
def test_simkubes_valid_programs_parse(program: str) -> None:
    parse_skel(program)


@pytest.mark.parametrize(("program", "line", "column", "message"), SHOULD_NOT_PARSE)
def test_simkubes_invalid_programs_are_refused_with_their_position(
    program: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(SkelSyntaxError) as caught:
        parse_skel(program, "bad.skel")
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert message in error.problem
    assert str(error).startswith(f"bad.skel:{line}:{column}: ")
    # the offending line is shown with a caret under the column
    shown, caret = str(error).splitlines()[1:3]
    assert shown == "  " + program.splitlines()[line - 1]
    assert caret == "  " + " " * (column - 1) + "^"


def test_simkubes_example_sanitiser_parses() -> None:
    commands = parse_skel((SIMKUBE_TRACES / "skel" / "sanitize.skel").read_text(), "sanitize.skel")
    assert len(commands) == 11
    assert all(c.action is Action.REMOVE for c in commands)
    assert commands[7].line == 12  # statements remember where they start


# ---- what the parse gives ---------------------------------------------------------------------------
def test_paths_split_into_keys_indices_wildcards_and_quoted_keys() -> None:
    (command,) = parse_skel('remove(spec.containers[3].env[*]."a.b/c".x);')
    assert command.target == Path(
        None, ("spec", "containers", 3, "env", WILDCARD, "a.b/c", "x"), 'spec.containers[3].env[*]."a.b/c".x'
    )


def test_values_times_and_comparisons() -> None:
    program = 'modify(@t < 2h && @t >= 1700000000 && spec.n > 3 && spec.b == TRUE, spec.s = "v");'
    (command,) = parse_skel(program)
    assert command.selector == (
        TimeTest(Op.LT, 7200, relative=True),
        TimeTest(Op.GE, 1_700_000_000, relative=False),
        ResourceTest(Check.COMPARE, Path(None, ("spec", "n"), "spec.n"), Op.GT, Literal(3)),
        ResourceTest(Check.COMPARE, Path(None, ("spec", "b"), "spec.b"), Op.EQ, Literal(True)),
    )
    assert command.value == Literal("v")


def test_a_variable_definition() -> None:
    (command,) = parse_skel("remove($x := spec.volumes[*] | exists($x.secret), $x);")
    assert command.selector == (
        VarTest(
            "$x",
            Path(None, ("spec", "volumes", WILDCARD), "spec.volumes[*]"),
            ResourceTest(Check.EXISTS, Path("$x", ("secret",), "$x.secret")),
        ),
    )
    assert command.target == Path("$x", (), "$x")


def test_whitespace_inside_a_path_is_refused() -> None:
    with pytest.raises(SkelSyntaxError, match=r"<skel>:1:12: unexpected '\.'"):
        parse_skel("remove(spec. template);")


def test_a_missing_semicolon_is_reported_on_the_next_statement() -> None:
    with pytest.raises(SkelSyntaxError) as caught:
        parse_skel("remove(status)\nremove(metadata);")
    assert (caught.value.line, caught.value.column) == (2, 1)
    assert "expected ';'" in caught.value.problem


def test_delete_takes_a_selector_only() -> None:
    # SimKube's bare-pods doc shows delete(kind == "Pod", spec...), which its grammar rejects too.
    with pytest.raises(SkelSyntaxError, match="expected"):
        parse_skel('delete(kind == "Pod", spec.nodeName);')


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("remove($x);", "$x is not defined by this statement's selector"),
        ("remove(exists($x.a), status);", "$x is used before it is defined"),
        ("remove($x := spec.a[*] | exists($y.b), $x);", "the test of $x must be about $x"),
        ("remove($x.a := spec.a[*] | exists($x.a), status);", "cannot be defined"),
        ("modify($x := spec.a[*] | exists($x.b), spec.c = $z);", "$z is not defined"),
        (
            "remove($x := spec.a[*] | exists($x.b) && $x := spec.a[*] | exists($x.c), $x);",
            "$x is defined twice",
        ),
    ],
)
def test_variable_misuse_is_a_positioned_error(program: str, message: str) -> None:
    with pytest.raises(SkelSyntaxError) as caught:
        parse_skel(program)
    assert message in caught.value.problem
    assert caught.value.line == 1
    assert caught.value.column > 1


# ---- limits: SimKube's 64-bit numbers, paths a trace can hold ---------------------------------------
TOO_BIG = "9223372036854775808"  # 2**63


@pytest.mark.parametrize(
    ("program", "line", "column", "message"),
    [
        (
            f"remove(status);\nmodify(spec.replicas = {TOO_BIG});",
            2,
            24,
            f"the number {TOO_BIG} is out of range",
        ),
        (
            "modify(spec.replicas = 99999999999999999999999999999);",
            1,
            24,
            "the number 99999999999999999999999999999 is out of range",
        ),
        ("modify(spec.replicas = " + "9" * 5000 + ");", 1, 24, "(5000 characters) is out of range"),
        (f"remove(spec.containers[{TOO_BIG}]);", 1, 8, f"the index {TOO_BIG} is out of range"),
        (f"remove(spec.a == {TOO_BIG}, status);", 1, 18, "is out of range"),
        (f"delete(@t >= {TOO_BIG});", 1, 14, f"the time {TOO_BIG} is out of range"),
        ("delete(@t >= 3000000000000000000h);", 1, 14, "the time 3000000000000000000h is out of range"),
        (
            "modify(" + ".".join(["a"] * 3000) + " = 1);",
            1,
            8,
            "the path has 3000 parts; a SKEL path has at most 100",
        ),
        ("remove(status == " + ".".join(["a"] * 101) + ", status);", 1, 18, "the path has 101 parts"),
    ],
)
def test_numbers_past_64_bits_and_overlong_paths_are_refused_at_their_place(
    program: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(SkelSyntaxError) as caught:
        parse_skel(program, "big.skel")
    assert (caught.value.line, caught.value.column) == (line, column)
    assert message in caught.value.problem
    assert str(caught.value).startswith(f"big.skel:{line}:{column}: ")


def test_the_largest_64_bit_number_and_a_100_part_path_are_accepted() -> None:
    (modify, remove, delete) = parse_skel(
        f"modify(spec.replicas = {2**63 - 1});\nremove({'.'.join(['a'] * 100)});\ndelete(@t >= {2**63 - 1});"
    )
    assert modify.value == Literal(2**63 - 1)
    assert remove.target is not None
    assert len(remove.target.segments) == 100
    assert delete.selector == (TimeTest(Op.GE, 2**63 - 1, relative=False),)


# ---- generated paths parse back to what they name ---------------------------------------------------
_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-/]{0,8}", fullmatch=True)


@given(st.lists(_KEYS | st.just("*") | st.from_regex(r"[0-9]{1,3}", fullmatch=True), max_size=6), _KEYS)
def test_generated_paths_parse_back_to_their_segments(rest: list[str], first: str) -> None:
    segments = [first, *rest]
    (command,) = parse_skel(f"remove({skel_path(segments)});")
    assert command.target is not None
    expected = [WILDCARD if s == "*" else int(s) if s.isdigit() else s for s in segments]
    assert list(command.target.segments) == expected
