"""A topic's id (KIP-516): what tells a topic deleted and re-created under the same name from the one a
segment store was filled from. aiokafka speaks the Metadata API only up to v5, which has no topic ids,
so this module adds the one request that carries them (Metadata v12, a flexible version), used once per
sink assignment."""

from __future__ import annotations

import base64
from io import BytesIO
from typing import Any

from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

_NO_ID = bytes(16)


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]  # aiokafka is untyped here
    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        return data.read(16)


class _MetadataResponseV12(Response):  # type: ignore[misc]  # aiokafka is untyped here
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", _Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _MetadataRequestV12(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped here
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = _MetadataResponseV12
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(("topic_id", _Uuid), ("name", CompactString("utf-8")), ("tags", TaggedFields)),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class TopicIdRequest(Request[_MetadataRequestV12]):  # type: ignore[misc]  # aiokafka is untyped here
    """Metadata of one topic, with its id; never creates the topic."""

    API_KEY = 3

    def __init__(self, topic: str) -> None:
        self._topic = topic

    def build(self, request_struct_class: type[_MetadataRequestV12]) -> _MetadataRequestV12:
        return request_struct_class([(_NO_ID, self._topic, {})], False, False, {})


def topic_id_of(response: Any, topic: str) -> str | None:
    """The topic's id as Kafka's tools print it (base64url, no padding); None if the broker does not
    know the topic or gave no id."""
    for error_code, name, raw_id, *_ in response.topics:
        if name == topic and not error_code and raw_id and raw_id != _NO_ID:
            return base64.urlsafe_b64encode(raw_id).rstrip(b"=").decode()
    return None
