"""The optional Strimzi resources (k8s/prod/strimzi) say what the secured local broker proves: the same
ACLs per kubetape principal, and the topic set `kubetape topics create` makes (compacted state and resume
topics, replicated, min.insync.replicas below the replicas)."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline.io.kafka.topics import topic_set
from pipeline.stack.kafka_security import ACLS

STRIMZI = Path(__file__).resolve().parents[2] / "k8s" / "prod" / "strimzi"


def test_the_kafka_users_grant_what_the_secured_stack_grants_and_nothing_more() -> None:
    users = [d for d in yaml.safe_load_all((STRIMZI / "users.yaml").read_text()) if d]
    granted = {
        (u["metadata"]["name"].removeprefix("kubetape-"), a["resource"]["type"], a["resource"]["patternType"],
         a["resource"]["name"], op)
        for u in users
        for a in u["spec"]["authorization"]["acls"]
        for op in a["operations"]
    }  # fmt: skip
    camel = {"WRITE": "Write", "READ": "Read", "DESCRIBE": "Describe", "CREATE": "Create"}
    camel["DESCRIBE_CONFIGS"] = "DescribeConfigs"
    expected = {
        (who, rtype.lower(), pattern.lower(), name, camel[op])
        for who, acls in ACLS.items()
        for rtype, pattern, name, op in acls
    }
    assert granted == expected
    assert all(u["spec"]["authentication"]["type"] == "scram-sha-512" for u in users)


def test_the_kafka_topics_are_the_topic_set_replicated() -> None:
    topics = {
        d["spec"]["topicName"]: d["spec"]
        for d in yaml.safe_load_all((STRIMZI / "topics.yaml").read_text())
        if d
    }
    for spec in topic_set(partitions=6, replication_factor=3, min_insync_replicas=2):
        found = topics[spec.name]
        assert (found["partitions"], found["replicas"]) == (spec.partitions, spec.replication_factor)
        assert found["config"]["min.insync.replicas"] == "2"
        assert (found["config"].get("cleanup.policy") == "compact") == spec.compacted
