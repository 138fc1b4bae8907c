"""The shared pieces of Kubernetes API access: the apiserver's HTTP statuses map to the exception tree in
one place (the message says what was asked and what the apiserver answered), and a watch response is
split into its lines whatever the chunking."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import orjson
import pytest

from pipeline.io.kube.status import error_for_status
from pipeline.io.kube.transport import watch_lines
from pipeline.model.errors import (
    AccessDeniedError,
    ApiUnavailableError,
    ConflictError,
    GoneError,
    KubeApiError,
    NotFoundError,
    ObjectRejectedError,
)


@pytest.mark.parametrize(
    ("status", "expected", "retriable"),
    [
        (400, ObjectRejectedError, False),
        (401, AccessDeniedError, False),
        (403, AccessDeniedError, False),
        (404, NotFoundError, False),
        (409, ConflictError, False),
        (410, GoneError, True),
        (422, ObjectRejectedError, False),
        (429, ApiUnavailableError, True),
        (500, ApiUnavailableError, True),
        (503, ApiUnavailableError, True),
    ],
)
def test_each_status_has_its_class(status: int, expected: type[KubeApiError], retriable: bool) -> None:
    body = orjson.dumps({"kind": "Status", "reason": "Because", "message": "the apiserver says no"})
    error = error_for_status("apply ConfigMap ns/cm", status, body)
    assert type(error) is expected
    assert error.retriable is retriable
    assert (error.status, error.reason) == (status, "Because")
    assert str(error) == f"apply ConfigMap ns/cm: HTTP {status} Because: the apiserver says no"


def test_a_body_that_is_not_a_status_is_quoted() -> None:
    error = error_for_status("GET /api/v1/pods", 502, b"<html>bad gateway</html>" + b"x" * 1000)
    assert isinstance(error, ApiUnavailableError)
    assert error.reason == ""
    assert str(error).startswith("GET /api/v1/pods: HTTP 502: <html>bad gateway</html>")
    assert len(str(error)) < 600, "a huge body is cut"


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class _Response:
    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)


@pytest.mark.parametrize("cut", [1, 3, 7, 1000])
async def test_watch_lines_survive_any_chunking(cut: int) -> None:
    stream = b'{"type":"ADDED"}\n\n{"type":"MODIFIED","object":{"a":"x\\ny"}}\n{"type":"DELETED"}\n{"partial'
    chunks = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    lines = [line async for line in watch_lines(cast(Any, _Response(chunks)))]
    assert [orjson.loads(line)["type"] for line in lines] == ["ADDED", "MODIFIED", "DELETED"]
    assert orjson.loads(lines[1])["object"]["a"] == "x\ny", (
        "an escaped newline inside a string is no line end"
    )
