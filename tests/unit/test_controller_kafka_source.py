"""A Simulation replaying a range of a secured Kafka topic: the replayer Job gets the client properties
and TLS files of ``spec.source.topic.kafkaConfigSecret`` as files, never as arguments or environment."""

from __future__ import annotations

from pipeline.controller.objects import KAFKA_CONFIG_MOUNT, replayer_job
from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import parse_spec
from tests.fakes.replay_job import job_document


def test_a_topic_source_mounts_its_kafka_config_secret_and_passes_the_file() -> None:
    topic = {"bootstrap": "kafka:9093", "from": "-30m", "to": "now", "kafkaConfigSecret": "kubetape-kafka"}
    sim = {"metadata": {"name": "prod-kafka", "uid": "u-1"}, "spec": {"source": {"topic": topic}}}
    spec = parse_spec(sim)
    assert job_document("prod-kafka", 0, spec)["kafkaConfig"] == f"{KAFKA_CONFIG_MOUNT}/client.properties"
    pod = replayer_job(sim, 0, spec, ControllerSettings(identity="c"))["spec"]["template"]["spec"]
    assert {"name": "kafka-config", "secret": {"secretName": "kubetape-kafka", "defaultMode": 0o440}} in (
        pod["volumes"]
    )
    container = pod["containers"][0]
    assert {"name": "kafka-config", "mountPath": KAFKA_CONFIG_MOUNT, "readOnly": True} in (
        container["volumeMounts"]
    )
    assert "envFrom" not in container


def test_a_topic_source_without_a_secret_connects_in_plaintext_as_before() -> None:
    topic = {"bootstrap": "kafka:9092", "from": "-30m", "to": "now"}
    spec = parse_spec({"metadata": {"name": "p", "uid": "u"}, "spec": {"source": {"topic": topic}}})
    assert "kafkaConfig" not in job_document("p", 0, spec)
