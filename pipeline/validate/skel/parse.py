"""Parsing SKEL programs: SimKube's grammar (``sk-skel/src/skel.pest``) as a lark LALR grammar.

A program is a list of statements, each ended by ``;``; whitespace and ``#`` comments are ignored::

    remove(status);
    remove($x := spec.template.spec.containers[*].env[*] | exists($x.valueFrom.secretKeyRef), $x);
    modify(@t >= 10m && metadata.labels.app == "web", spec.replicas = 3);
    delete(metadata.namespace == "kube-system");

A path is one token, as in SimKube (no whitespace inside): its parts are split by :func:`_path` after lark
has matched it. Errors raise :class:`SkelSyntaxError` (a ConfigError) with the line, the column, what was
expected and the offending line with a caret under the place.

Numbers and times are SimKube's 64-bit integers (its parser panics past them, and a trace cannot hold a
larger number), and a path has at most :data:`MAX_PATH_SEGMENTS` parts (a longer one would nest maps
deeper than a trace file can be written); both are refused here, at their place in the program.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import lark
from lark import Token, Transformer, v_args

from pipeline.model.errors import ConfigError
from pipeline.validate.skel.ast import (
    WILDCARD,
    Action,
    Check,
    Command,
    Condition,
    Literal,
    Op,
    Path,
    ResourceTest,
    Segment,
    TimeTest,
    VarTest,
)

_GRAMMAR = r"""
start: (command ";")*

?command: remove_cmd | modify_cmd | delete_cmd
remove_cmd: REMOVE "(" (selector ",")? PATH ")"
modify_cmd: MODIFY "(" (selector ",")? PATH "=" rhs ")"
delete_cmd: DELETE "(" selector ")"

selector: STAR -> select_all
        | condition ("&&" condition)* -> select_list
?condition: time_test | resource_test | var_test
time_test: "@t" COMPARATOR TS_VALUE
?resource_test: exists_test | not_exists_test | compare_test
exists_test: "exists" "(" PATH ")"
not_exists_test: "!exists" "(" PATH ")"
compare_test: PATH COMPARATOR rhs
var_test: PATH ":=" PATH "|" resource_test
?rhs: NUMBER -> number
    | STRING -> string
    | TRUE -> true
    | FALSE -> false
    | PATH -> path_value

REMOVE: "remove"
MODIFY: "modify"
DELETE: "delete"
STAR: "*"
COMPARATOR: "==" | "!=" | "<=" | ">=" | "<" | ">"
TS_VALUE: /[0-9]+[hms]?/
NUMBER.2: /[0-9]+(?![A-Za-z0-9_\-.\[])/
TRUE.2: /(?i:true)(?![A-Za-z0-9_\-.\[])/
FALSE.2: /(?i:false)(?![A-Za-z0-9_\-.\[])/
STRING.2: /"[^"]*"/
KEY_PART: /[A-Za-z0-9_\-]+/ | /"[A-Za-z0-9_.\/\-]+"/
VAR_NAME: /\$[A-Za-z_][A-Za-z0-9_]*/
PATH: (VAR_NAME | KEY_PART) ("." KEY_PART | /\[([0-9]+|\*)\]/)*

COMMENT: /#[^\n]*/
%import common.WS
%ignore WS
%ignore COMMENT
"""

_DESCRIBE = {
    "PATH": "a field path (e.g. spec.template.spec or $x.name)",
    "COMPARATOR": "a comparison (==, !=, <=, >=, <, >)",
    "TS_VALUE": "a time (seconds since the epoch, or 10s, 5m, 2h into the trace)",
    "NUMBER": "a number",
    "STRING": 'a "string"',
    "TRUE": "true",
    "FALSE": "false",
    "STAR": "'*'",
    "REMOVE": "remove",
    "MODIFY": "modify",
    "DELETE": "delete",
    "$END": "the end of the program",
}

_UNITS = {"s": 1, "m": 60, "h": 3600}
MAX_INTEGER = 2**63 - 1
"""The largest number or time (seconds) a program may hold: SimKube's ``i64``, and msgpack's limit."""
MAX_PATH_SEGMENTS = 100
"""The most keys and indices a path may have. Kubernetes fields are far shallower (a CRD's schema is a
few dozen deep); the limit keeps the nesting ``modify`` creates writable (msgpack nests 511 deep)."""
_SEGMENT = re.compile(r'\.?(?:"(?P<quoted>[^"]+)"|(?P<plain>[A-Za-z0-9_\-]+))|\[(?P<index>[0-9]+|\*)\]')


class SkelSyntaxError(ConfigError):
    """A SKEL program does not parse or misuses a variable; ``line`` and ``column`` are 1-based."""

    def __init__(self, source: str, text: str, line: int, column: int, problem: str) -> None:
        lines = text.splitlines() or [""]
        shown = lines[line - 1] if 0 < line <= len(lines) else ""
        super().__init__(f"{source}:{line}:{column}: {problem}\n  {shown}\n  {' ' * (column - 1)}^")
        self.source, self.line, self.column, self.problem = source, line, column, problem


@cache
def _parser() -> lark.Lark:
    # LALR with the contextual lexer: each parser state lexes only what it accepts, so "10m" after "@t >="
    # is a time and "10" after "==" a number, and errors list exactly what was expected there.
    return lark.Lark(_GRAMMAR, parser="lalr", lexer="contextual", propagate_positions=True)


def parse_skel(text: str, source: str = "<skel>") -> tuple[Command, ...]:
    """The statements of the SKEL program ``text``; SkelSyntaxError naming ``source``, line and column."""
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        raise _syntax_error(exc, text, source) from None
    try:
        commands: tuple[Command, ...] = _ToAst().transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, _MisuseError):
            misuse = exc.orig_exc
            raise SkelSyntaxError(source, text, misuse.line, misuse.column, misuse.problem) from None
        raise
    return commands


def _expected(names: set[str]) -> str:
    described = set()
    for name in names:
        if name in _DESCRIBE:
            described.add(_DESCRIBE[name])
            continue
        pattern = _parser().get_terminal(name).pattern
        described.add(f"'{pattern.value}'" if isinstance(pattern, lark.lexer.PatternStr) else name)
    return " or ".join(sorted(described))


def _syntax_error(exc: lark.exceptions.UnexpectedInput, text: str, source: str) -> SkelSyntaxError:
    if isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "$END":
        line, column = _end_position(text)
        return SkelSyntaxError(
            source, text, line, column, f"unexpected end of program; expected {_expected(exc.expected)}"
        )
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        found = f"{exc.token.value!r}"
        return SkelSyntaxError(
            source, text, exc.line, exc.column, f"found {found}; expected {_expected(exc.expected)}"
        )
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        position = exc.pos_in_stream or 0
        char = text[position] if position < len(text) else ""
        return SkelSyntaxError(
            source, text, exc.line, exc.column, f"unexpected {char!r}; expected {_expected(exc.allowed)}"
        )
    line, column = _end_position(text)
    return SkelSyntaxError(source, text, line, column, "unexpected end of program")


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


class _MisuseError(Exception):
    """A construct the grammar admits but SKEL forbids (an undefined variable...), with its position."""

    def __init__(self, token: Token, problem: str) -> None:
        super().__init__(problem)
        self.line, self.column, self.problem = token.line or 0, token.column or 0, problem


def _path(token: Token) -> Path:
    text = str(token)
    var = None
    rest = text
    if text.startswith("$"):
        var, _dot, rest = text.partition(".")
        rest = "." + rest if rest else ""
        if "[" in var:  # "$x[0]": the variable ends at the bracket
            var, bracket, tail = var.partition("[")
            rest = bracket + tail + rest
    segments: list[Segment] = []
    for match in _SEGMENT.finditer(rest):
        if match["quoted"] is not None:
            segments.append(match["quoted"])
        elif match["plain"] is not None:
            segments.append(match["plain"])
        else:
            segments.append(
                WILDCARD if match["index"] == "*" else _integer(token, match["index"], "the index")
            )
    if len(segments) > MAX_PATH_SEGMENTS:
        raise _MisuseError(
            token, f"the path has {len(segments)} parts; a SKEL path has at most {MAX_PATH_SEGMENTS}"
        )
    return Path(var, tuple(segments), text)


def _integer(token: Token, digits: str, what: str, scale: int = 1) -> int:
    """``digits`` (times ``scale``) as an int; a positioned error past :data:`MAX_INTEGER`. Long digit
    strings are refused before conversion (Python will not convert more than 4300 digits)."""
    value = int(digits) * scale if len(digits) <= len(str(MAX_INTEGER)) else MAX_INTEGER + 1
    if value > MAX_INTEGER:
        shown = _abbreviated(digits if scale == 1 else str(token))
        raise _MisuseError(
            token,
            f"{what} {shown} is out of range: SKEL numbers are whole numbers from 0 to {MAX_INTEGER} "
            "(64-bit, as in SimKube)",
        )
    return value


def _abbreviated(text: str) -> str:
    """A number as a message shows it: whole when short, else its ends and its length."""
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)"


def _variables(path: Path | Literal | None) -> list[str]:
    return [path.var] if isinstance(path, Path) and path.var else []


@v_args(inline=True)
class _ToAst(Transformer[Token, Any]):
    """Builds :mod:`.ast` nodes and checks variables: each one used must be defined earlier in the same
    statement, a definition must test the variable it defines, and ``$x := ...`` defines a bare name."""

    def start(self, *commands: Command) -> tuple[Command, ...]:
        return commands

    def select_all(self, _star: Token) -> tuple[Token, tuple[Condition, ...]]:
        return _star, ()

    def select_list(self, *conditions: tuple[Token, Condition]) -> tuple[Token, tuple[Condition, ...]]:
        self._check_definitions([c for _t, c in conditions], [t for t, _c in conditions])
        return conditions[0][0], tuple(c for _t, c in conditions)

    def time_test(self, op: Token, value: Token) -> tuple[Token, TimeTest]:
        text = str(value)
        if text[-1] in _UNITS:
            seconds = _integer(value, text[:-1], "the time", _UNITS[text[-1]])
            return op, TimeTest(Op(str(op)), seconds, relative=True)
        return op, TimeTest(Op(str(op)), _integer(value, text, "the time"), relative=False)

    def exists_test(self, path: Token) -> tuple[Token, ResourceTest]:
        return path, ResourceTest(Check.EXISTS, _path(path))

    def not_exists_test(self, path: Token) -> tuple[Token, ResourceTest]:
        return path, ResourceTest(Check.NOT_EXISTS, _path(path))

    def compare_test(self, path: Token, op: Token, rhs: Token | Literal) -> tuple[Token, ResourceTest]:
        value = _path(rhs) if isinstance(rhs, Token) else rhs
        return path, ResourceTest(Check.COMPARE, _path(path), Op(str(op)), value)

    def var_test(self, var: Token, base: Token, test: tuple[Token, ResourceTest]) -> tuple[Token, VarTest]:
        name = _path(var)
        if name.var is None or name.segments:
            raise _MisuseError(var, f"{str(var)!r} cannot be defined: a definition is '$name := path | test'")
        token, resource_test = test
        if resource_test.path.var != name.var:
            raise _MisuseError(
                token, f"the test of {name.var} must be about {name.var} (e.g. exists({name.var}.field))"
            )
        return var, VarTest(name.var, _path(base), resource_test)

    def number(self, token: Token) -> Literal:
        return Literal(_integer(token, str(token), "the number"))

    def string(self, token: Token) -> Literal:
        return Literal(str(token)[1:-1])

    def true(self, _token: Token) -> Literal:
        return Literal(True)

    def false(self, _token: Token) -> Literal:
        return Literal(False)

    def path_value(self, token: Token) -> Token:
        return token  # kept as a token until the statement is built, so misuse can name its position

    def remove_cmd(self, keyword: Token, *args: Any) -> Command:
        selector, target = (args[0][1], args[1]) if len(args) == 2 else ((), args[0])
        self._check_uses(selector, [target])
        return Command(Action.REMOVE, selector, _path(target), None, keyword.line or 0, keyword.column or 0)

    def modify_cmd(self, keyword: Token, *args: Any) -> Command:
        selector, target, value = (args[0][1], args[1], args[2]) if len(args) == 3 else ((), args[0], args[1])
        tokens = [target] + ([value] if isinstance(value, Token) else [])
        self._check_uses(selector, tokens)
        rhs = _path(value) if isinstance(value, Token) else value
        return Command(Action.MODIFY, selector, _path(target), rhs, keyword.line or 0, keyword.column or 0)

    def delete_cmd(self, keyword: Token, selector: tuple[Token, tuple[Condition, ...]]) -> Command:
        return Command(Action.DELETE, selector[1], None, None, keyword.line or 0, keyword.column or 0)

    # ---- variable checks ------------------------------------------------------------------------
    def _check_definitions(self, conditions: list[Condition], tokens: list[Token]) -> None:
        defined: set[str] = set()
        for condition, token in zip(conditions, tokens, strict=True):
            if isinstance(condition, VarTest):
                used = _variables(condition.base) + _variables(condition.test.rhs)
                if condition.var in defined:
                    raise _MisuseError(token, f"{condition.var} is defined twice in this statement")
            elif isinstance(condition, ResourceTest):
                used = _variables(condition.path) + _variables(condition.rhs)
            else:
                used = []
            for var in used:
                if var not in defined:
                    raise _MisuseError(token, f"{var} is used before it is defined ('{var} := path | test')")
            if isinstance(condition, VarTest):
                defined.add(condition.var)

    def _check_uses(self, selector: tuple[Condition, ...], tokens: list[Token]) -> None:
        defined = {c.var for c in selector if isinstance(c, VarTest)}
        for token in tokens:
            var = _path(token).var
            if var is not None and var not in defined:
                raise _MisuseError(token, f"{var} is not defined by this statement's selector")
