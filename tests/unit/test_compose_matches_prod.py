"""docker-compose.yml runs kubetape's watcher and sink as k8s/prod runs them: the same image (the
repository's Dockerfile), the same subcommands, flags and environment variables. Where they must differ,
the difference is listed below with its reason, and a listed difference that no longer exists fails too,
so the list stays the true one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PROD = REPO_ROOT / "k8s" / "prod"

# compose service → k8s/prod Deployment
SERVICES = {"watcher": "kubetape-watcher", "sink": "kubetape-sink"}

# (service, flag or variable) → why only one side has it
ONLY_IN_COMPOSE = {
    ("watcher", "--kubeconfig"): "compose runs outside the recorded cluster; in a pod the service account "
    "is the credential",
}
ONLY_IN_PROD = {
    ("watcher", "POD_IP"): "a pod listens on its pod IP for the kubelet's probes; compose listens on 0.0.0.0 "
    "of its container network and publishes the port on 127.0.0.1 only",
    ("sink", "POD_IP"): "as for the watcher",
    ("sink", "AWS_REGION"): "compose's segment store is a directory volume: no S3 server, no credentials",
    ("sink", "AWS_ACCESS_KEY_ID"): "as AWS_REGION",
    ("sink", "AWS_SECRET_ACCESS_KEY"): "as AWS_REGION",
}


def _flags(args: list[str]) -> set[str]:
    return {a for a in args if a.startswith("--")}


def _env_file(name: str) -> set[str]:
    """The variable names a secretGenerator env file sets (commented lines are choices, not settings)."""
    lines = (PROD / name).read_text().splitlines()
    return {line.split("=", 1)[0] for line in lines if line.strip() and not line.lstrip().startswith("#")}


def _prod_container(deployment: str) -> dict[str, Any]:
    kustomization = yaml.safe_load((PROD / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        path = PROD / resource
        if not path.is_file():
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == deployment:
                (container,) = doc["spec"]["template"]["spec"]["containers"]
                return dict(container)
    raise AssertionError(f"k8s/prod has no Deployment {deployment}")


def _prod_env(container: dict[str, Any]) -> set[str]:
    kustomization = yaml.safe_load((PROD / "kustomization.yaml").read_text())
    generated = {g["name"]: g for g in kustomization["secretGenerator"]}
    names = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        secret = generated[source["secretRef"]["name"]]
        for env_file in secret["envs"]:
            names |= _env_file(env_file)
    return names


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"])


def _differences() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    only_compose: set[tuple[str, str]] = set()
    only_prod: set[tuple[str, str]] = set()
    services = _compose()
    for service, deployment in SERVICES.items():
        prod = _prod_container(deployment)
        compose = services[service]
        compose_names = _flags(compose["command"]) | set(compose.get("environment", {}))
        prod_names = _flags(prod["args"]) | _prod_env(prod)
        only_compose |= {(service, n) for n in compose_names - prod_names}
        only_prod |= {(service, n) for n in prod_names - compose_names}
    return only_compose, only_prod


def test_compose_builds_kubetape_from_the_dockerfile_prod_deploys() -> None:
    kustomization = yaml.safe_load((PROD / "kustomization.yaml").read_text())
    assert [i["name"] for i in kustomization["images"]] == ["kubetape"]
    for service, deployment in SERVICES.items():
        assert _prod_container(deployment)["image"] == "kubetape"
        build = _compose()[service]["build"]
        context, dockerfile = (
            (build, "Dockerfile")
            if isinstance(build, str)
            else (
                build.get("context", "."),
                build.get("dockerfile", "Dockerfile"),
            )
        )
        assert (REPO_ROOT / context).resolve() == REPO_ROOT, f"{service} builds from {context}"
        assert dockerfile == "Dockerfile", f"{service} builds from {dockerfile}"


def test_compose_runs_prods_subcommands() -> None:
    services = _compose()
    for service, deployment in SERVICES.items():
        assert services[service]["command"][0] == _prod_container(deployment)["args"][0]


def test_compose_sets_prods_flags_and_variables_but_the_listed_exceptions() -> None:
    only_compose, only_prod = _differences()
    assert only_compose == set(ONLY_IN_COMPOSE), (
        "docker-compose.yml and k8s/prod differ in flags or variables only compose sets; make them agree, "
        f"or list the difference with its reason in ONLY_IN_COMPOSE: {sorted(only_compose)}"
    )
    assert only_prod == set(ONLY_IN_PROD), (
        "k8s/prod sets flags or variables docker-compose.yml does not; make them agree, or list the "
        f"difference with its reason in ONLY_IN_PROD: {sorted(only_prod)}"
    )


def test_compose_records_the_kinds_prod_records() -> None:
    watcher = _compose()["watcher"]
    command = watcher["command"]
    config = command[command.index("--config") + 1]
    (mount,) = [v for v in watcher["volumes"] if v.split(":")[1] == config]
    assert (REPO_ROOT / mount.split(":")[0]).resolve() == PROD / "tracer.yaml"
    prod_args = _prod_container("kubetape-watcher")["args"]
    assert prod_args[prod_args.index("--config") + 1] == config
