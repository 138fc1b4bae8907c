"""Kubernetes API access: the apiserver's HTTP statuses map to the exception tree in one place (the
message says what was asked and what the apiserver answered), a watch response is split into its lines
whatever the chunking, and the one client (against a scripted apiserver) discovers kinds, lists, watches
and says what each refusal means to the stage that asked."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import aiohttp
import orjson
import pytest

from pipeline.io.kube.client import KubeClient, controller_client
from pipeline.io.kube.pod_watch import PodWatch
from pipeline.io.kube.status import error_for_status
from pipeline.io.kube.transport import watch_lines
from pipeline.io.kube.types import ApiResource, ResourceVersion
from pipeline.model.errors import (
    AccessDeniedError,
    ApiUnavailableError,
    ConfigError,
    ConflictError,
    GoneError,
    KubeApiError,
    NotFoundError,
    ObjectRejectedError,
    UnknownKindError,
    WatchBrokenError,
)
from pipeline.model.keys import GroupVersionKind


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


# ---- the one client, against a scripted apiserver ------------------------------------------------
Answer = tuple[int, Any] | Exception
"""An HTTP status with a JSON body (a list of dicts: watch lines; bytes: sent raw), or what the
connection raised."""


class _Answered:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        lines = body if isinstance(body, list) else [body]
        raw = isinstance(body, bytes)  # sent as it is
        self._data = body if raw else b"\n".join(orjson.dumps(line) for line in lines) + b"\n"
        self.content = _Content([self._data])

    async def read(self) -> bytes:
        return self._data

    def release(self) -> None:
        pass


class ScriptedApi:
    """An ``ApiClient`` whose answers are scripted per (method, path), a watch's path ending in
    ``?watch``; the last answer repeats."""

    def __init__(self, script: dict[tuple[str, str], list[Answer]]) -> None:
        self.script = script
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    async def call_api(self, path: str, method: str, query_params: Any = (), **_: Any) -> _Answered:
        query = dict(query_params or [])
        self.calls.append((method, path, query))
        answers = self.script[(method, path + ("?watch" if query.get("watch") == "1" else ""))]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return _Answered(*answer)

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.calls if (m, p) == (method, path))


CORE = {
    "resources": [
        {"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["get", "list", "watch"]},
        {"name": "pods/status", "kind": "Pod", "namespaced": True, "verbs": ["get", "patch"]},
        {"name": "bindings", "kind": "Binding", "namespaced": True, "verbs": ["create"]},
    ]
}
PODS = ApiResource("v1", "Pod", "pods", True)
POD_GVK = GroupVersionKind("", "v1", "Pod")


def client_for(script: dict[tuple[str, str], list[Answer]]) -> tuple[KubeClient, ScriptedApi]:
    api = ScriptedApi(script)
    return KubeClient(cast(Any, api)), api


async def test_discovery_skips_subresources_and_the_watcher_resolves_only_listable_kinds() -> None:
    kube, api = client_for({("GET", "/api/v1"): [(200, CORE)]})
    assert await kube.resolve(POD_GVK) == PODS
    assert await kube.resolve(GroupVersionKind("", "v1", "Binding")) is None, "bindings cannot be listed"
    assert (await kube.resource_for("v1", "Binding")).plural == "bindings", "but they can be written"
    assert api.count("GET", "/api/v1") == 1, "one discovery per group/version"


async def test_an_unknown_kind_is_looked_up_again_only_after_a_second_except_for_the_controller() -> None:
    script: dict[tuple[str, str], list[Answer]] = {("GET", "/apis/kubetape.dev/v1"): [(404, {})]}
    kube, api = client_for(script)
    for _ in range(3):
        with pytest.raises(UnknownKindError, match="install its CRD"):
            await kube.resource_for("kubetape.dev/v1", "ReplayRoot")
    assert api.count("GET", "/apis/kubetape.dev/v1") == 1, "a young miss is trusted"
    controller_api = ScriptedApi({("GET", "/apis/kubetape.dev/v1"): [(404, {})]})
    controller = controller_client(cast(Any, controller_api))
    with pytest.raises(UnknownKindError):
        await controller.resource_for("kubetape.dev/v1", "ReplayRoot")
    with pytest.raises(UnknownKindError):
        await controller.resource_for("kubetape.dev/v1", "ReplayRoot")
    # the first discovery, then one more for each miss: a CRD installed meanwhile is found at once
    assert controller_api.count("GET", "/apis/kubetape.dev/v1") == 3


async def test_the_watchers_reads_turn_refusals_into_what_the_watcher_does_about_them() -> None:
    kube, _ = client_for(
        {
            ("GET", "/api/v1/pods"): [(503, {"reason": "ServiceUnavailable", "message": "etcd down"})],
            ("GET", "/api/v1/namespaces/ns/pods/p"): [(403, {"reason": "Forbidden", "message": "no"})],
        }
    )
    with pytest.raises(WatchBrokenError, match="etcd down") as broken:
        await kube.list_all(PODS)
    assert (broken.value.status, broken.value.retriable) == (503, True)
    with pytest.raises(ConfigError, match="RBAC"):
        await kube.get_object(PODS, "ns", "p")


async def test_a_body_that_is_not_json_is_a_retriable_answer_not_a_crash() -> None:
    kube, _ = client_for({("GET", "/api/v1/pods"): [(200, b"<html>a proxy's page</html>")]})
    with pytest.raises(WatchBrokenError, match="not JSON") as broken:
        await kube.list_all(PODS)
    assert broken.value.retriable


async def test_the_object_verbs_say_an_unreachable_apiserver_is_retriable() -> None:
    refused = aiohttp.ClientConnectionError("connection refused")
    kube, _ = client_for(
        {("GET", "/api/v1"): [(200, CORE)], ("GET", "/api/v1/namespaces/ns/pods/p"): [refused]}
    )
    with pytest.raises(ApiUnavailableError, match="apiserver unreachable") as unreachable:
        await kube.get("v1", "Pod", "ns", "p")
    assert unreachable.value.retriable
    with pytest.raises(WatchBrokenError, match="unreachable"):
        await kube.get_object(PODS, "ns", "p")


async def test_a_full_list_follows_pages_and_starts_over_when_its_continue_token_expires() -> None:
    def page(names: list[str], cont: str, rv: str) -> tuple[int, Any]:
        items = [{"metadata": {"name": n}} for n in names]
        return (200, {"items": items, "metadata": {"continue": cont, "resourceVersion": rv}})

    kube, api = client_for(
        {
            ("GET", "/api/v1/pods"): [
                page(["a"], "t1", "5"),
                (410, {"reason": "Expired", "message": "continue token too old"}),
                page(["a", "b"], "t2", "9"),
                page(["c"], "", "9"),
            ]
        }
    )
    listed = await kube.list_all(PODS)
    assert [o["metadata"]["name"] for o in listed.items] == ["a", "b", "c"], "nothing of the expired list"
    assert listed.resource_version == "9"
    assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for o in listed.items)
    assert [q.get("continue", "") for _, _, q in api.calls] == ["", "t1", "", "t2"]


async def test_a_paged_list_yields_each_page_and_says_where_it_started_over() -> None:
    def page(names: list[str], cont: str, rv: str) -> tuple[int, Any]:
        items = [{"metadata": {"name": n}} for n in names]
        return (200, {"items": items, "metadata": {"continue": cont, "resourceVersion": rv}})

    kube, _ = client_for(
        {
            ("GET", "/api/v1/pods"): [
                page(["a"], "t1", "5"),
                (410, {"reason": "Expired", "message": "continue token too old"}),
                page(["a", "b"], "t2", "9"),
                page(["c"], "", "9"),
            ]
        }
    )
    pages = [page async for page in kube.list_pages(PODS)]
    assert [([o["metadata"]["name"] for o in p.items], p.resource_version, p.restarted) for p in pages] == [
        (["a"], "5", False),
        (["a", "b"], "9", True),
        (["c"], "9", False),
    ]


async def test_one_watch_stream_serves_the_watcher_and_the_controllers_change_feed() -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "11"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
        {"type": "WEIRD", "object": {}},
        {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "13"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}},
    ]
    malformed: list[str] = []
    api = ScriptedApi(
        {
            ("GET", "/api/v1"): [(200, CORE)],
            ("GET", "/api/v1/pods"): [(200, {"items": [], "metadata": {"resourceVersion": "10"}})],
            ("GET", "/api/v1/pods?watch"): [(200, lines)],
        }
    )
    kube = KubeClient(cast(Any, api), on_malformed=malformed.append)
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for event in kube.watch_objects(PODS, ResourceVersion("10")):
            seen.append((event.type, event.resource_version))

    with pytest.raises(GoneError, match="too old"):
        await watch()
    assert seen == [("ADDED", "11"), ("BOOKMARK", "12"), ("MODIFIED", "13")]
    assert malformed == ["watch of v1.Pod sent an event of unknown shape: type='WEIRD'"]
    watch_query = api.calls[-1][2]
    assert (watch_query["resourceVersion"], watch_query["allowWatchBookmarks"]) == ("10", "true")

    changes = cast(AsyncGenerator[str], kube.watch_changes("v1", "Pod"))
    assert [await anext(changes) for _ in range(3)] == ["RELIST", "ADDED", "MODIFIED"], "no bookmarks"
    await changes.aclose()


async def test_the_replays_pod_watch_keeps_its_labels_pods_and_the_bookmarks_on_the_one_client() -> None:
    mine = {"metadata": {"name": "a", "labels": {"replay": "r1"}, "resourceVersion": "11"}}
    other = {"metadata": {"name": "b", "labels": {"replay": "r2"}, "resourceVersion": "12"}}
    api = ScriptedApi(
        {
            ("GET", "/api/v1/pods"): [(200, {"items": [mine, other], "metadata": {"resourceVersion": "12"}})],
            ("GET", "/api/v1/pods?watch"): [
                (
                    200,
                    [
                        {"type": "ADDED", "object": other},
                        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}},
                        {"type": "MODIFIED", "object": mine},
                    ],
                )
            ],
        }
    )
    pods = PodWatch(cast(Any, api), "replay", "r1")
    listed = await pods.list_pods()
    assert ([p["metadata"]["name"] for p in listed.items], listed.resource_version) == (["a"], "12")
    seen = [(e.type, e.resource_version) async for e in pods.watch_pods(listed.resource_version)]
    assert seen == [("BOOKMARK", "13"), ("MODIFIED", "11")]
    # the apiserver selects the label, for the list and the watch alike
    assert [query.get("labelSelector") for _, _, query in api.calls] == ["replay=r1", "replay=r1"]
