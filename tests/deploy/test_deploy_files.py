"""The deploy files (``deploy/``) checked against the code they run, so that drift fails here.

No services and no Docker: the files are parsed, and every setting, command, module, queue and
grace period they name is compared with what this checkout really has.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import shlex
from base64 import b64decode
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings

try:
    import yaml
except ImportError:  # PyYAML belongs in the dev extras; until then say so, except in CI.
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(
        "PyYAML is not installed: .venv/bin/pip install 'pyyaml>=6,<7'", allow_module_level=True
    )

from brainhands.api.settings import ApiSettings
from brainhands.brain.agent import load_agent_modules
from brainhands.brain.models.settings import ModelSettings
from brainhands.brain.registry import load_task_modules
from brainhands.brain.settings import BrainSettings
from brainhands.cli import WORKERS, build_parser
from brainhands.hands.settings import HandsSettings
from brainhands.shared.config import CommonSettings
from brainhands.shared.tools import load_tool_modules
from brainhands.shared.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
IMAGE = "brainhands"
"""The image's name in compose.yaml and in the Kubernetes manifests (kustomize sets the rest)."""

SETTINGS: tuple[type[BaseSettings], ...] = (
    CommonSettings,
    HandsSettings,
    BrainSettings,
    ModelSettings,
    ApiSettings,
)
DRAIN_MARGIN = 5.0
"""Seconds past BRAINHANDS_SHUTDOWN_GRACE a process needs to hand work back and publish."""


# --- reading the files ----------------------------------------------------------------------


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml"})


def load_yaml(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization() -> dict[str, Any]:
    [doc] = load_yaml(K8S / "kustomization.yaml")
    assert isinstance(doc, dict)
    return doc


def k8s_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every object the kustomization applies, with the file it comes from."""
    return [
        (name, doc)
        for name in kustomization()["resources"]
        for doc in load_yaml(K8S / name)
        if isinstance(doc, dict)
    ]


def k8s_of_kind(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(file, doc) for file, doc in k8s_objects() if doc.get("kind") == kind]


def compose() -> dict[str, Any]:
    [doc] = load_yaml(COMPOSE)
    assert isinstance(doc, dict)
    return doc


def k8s_config() -> dict[str, str]:
    """The ConfigMap's data and the Secret's values, as the containers see them."""
    env: dict[str, str] = {}
    for _, doc in k8s_of_kind("ConfigMap"):
        env.update({k: str(v) for k, v in (doc.get("data") or {}).items()})
    for _, doc in k8s_of_kind("Secret"):
        env.update({k: str(v) for k, v in (doc.get("stringData") or {}).items()})
        env.update({k: b64decode(str(v)).decode() for k, v in (doc.get("data") or {}).items()})
    return env


def config_map_value(name: str) -> str | None:
    for _, doc in k8s_of_kind("ConfigMap"):
        value = (doc.get("data") or {}).get(name)
        if value is not None:
            return str(value)
    return None


def namespace() -> str:
    value = config_map_value("BRAINHANDS_NAMESPACE")
    return value if value is not None else str(CommonSettings.model_fields["namespace"].default)


def http_port(env: dict[str, str], where: str) -> int:
    """The fixed health port: by default a process picks any free one, which no probe finds."""
    port = int(env.get("BRAINHANDS_HTTP_PORT", "0"))
    assert port > 0, f"{where}: probes need a fixed BRAINHANDS_HTTP_PORT, not {port}"
    return port


def serving_port(command: str, env: dict[str, str], where: str) -> int:
    """The port a role's /healthz and /readyz answer on: the API serves them beside its
    routes, on BRAINHANDS_API_PORT; every other role on BRAINHANDS_HTTP_PORT."""
    if command != "api":
        return http_port(env, where)
    port = int(env.get("BRAINHANDS_API_PORT", ApiSettings.model_fields["api_port"].default))
    assert port > 0, f"{where}: probes need a fixed BRAINHANDS_API_PORT, not {port}"
    assert env.get("BRAINHANDS_API_HOST") == "0.0.0.0", (
        f"{where}: BRAINHANDS_API_HOST must be 0.0.0.0, or nothing outside the container "
        "reaches the API"
    )
    return port


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(doc)
    return [*(spec.get("initContainers") or []), *spec["containers"]]


def is_ours(image: str | None) -> bool:
    return image is not None and image.rsplit(":", 1)[0].rsplit("/", 1)[-1] == IMAGE


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) of each instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, rest = (pending + line).partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions (its FROM first), by its name (``AS``) or its position."""
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for word, rest in dockerfile_instructions():
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(found))
            current = found.setdefault(name, [])
        current.append((word, rest))
    return found


def lineage(name: str) -> list[tuple[str, str]]:
    """A stage's instructions after those of the stages it is built FROM: what its image has."""
    every = stages()
    own = every[name]
    base = own[0][1].split()[0]
    return (lineage(base) if base in every else []) + own


def final_stage() -> list[tuple[str, str]]:
    return lineage(list(stages())[-1])


def exec_form(text: str) -> list[str]:
    if text.startswith("["):
        parsed = json.loads(text)
        assert isinstance(parsed, list)
        return [str(p) for p in parsed]
    return ["/bin/sh", "-c", text]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word != "ENV":
            continue
        parts = shlex.split(rest)
        if parts and "=" not in parts[0]:  # legacy form: ENV NAME value
            env[parts[0]] = " ".join(parts[1:])
        else:
            for part in parts:
                name, _, value = part.partition("=")
                env[name] = value
    return env


def dockerfile_healthcheck() -> list[str] | None:
    checks = [rest for word, rest in final_stage() if word == "HEALTHCHECK"]
    if not checks:
        return None
    rest = checks[-1]
    if rest.upper() == "NONE":
        return None
    while rest.startswith("--"):
        rest = rest.split(None, 1)[1]
    assert rest.upper().startswith("CMD"), f"HEALTHCHECK without CMD: {rest}"
    return exec_form(rest[3:].strip())


# --- what the containers run ----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One command a container runs, and where it is declared."""

    where: str
    argv: list[str]
    """Arguments to ``brainhands`` (the image's ENTRYPOINT), or a whole command line if
    ``entrypoint`` overrides it."""
    entrypoint: bool = False
    env: tuple[tuple[str, str], ...] = ()


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(str(item).split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def compose_runs() -> Iterator[Run]:
    for name, service in compose()["services"].items():
        if not is_ours(service.get("image")) and "build" not in service:
            continue
        env = tuple(compose_env(service).items())
        entrypoint = service.get("entrypoint")
        command = service.get("command")
        if isinstance(command, str):
            command = shlex.split(command)
        if entrypoint:
            argv = [*(shlex.split(entrypoint) if isinstance(entrypoint, str) else entrypoint)]
            yield Run(f"compose {name}", [*argv, *(command or [])], entrypoint=True, env=env)
        elif command:
            yield Run(f"compose {name}", list(command), env=env)


def k8s_runs() -> Iterator[Run]:
    config = k8s_config()
    for file, doc in k8s_objects():
        if doc.get("kind") not in {"Deployment", "Job", "StatefulSet", "DaemonSet"}:
            continue
        for container in containers(doc):
            if not is_ours(container.get("image")):
                continue
            env = {
                **config,
                **{e["name"]: str(e.get("value", "")) for e in container.get("env") or []},
            }
            where = f"{file} {doc['metadata']['name']}/{container['name']}"
            if container.get("command"):
                argv = [*container["command"], *(container.get("args") or [])]
                yield Run(where, argv, entrypoint=True, env=tuple(env.items()))
            elif container.get("args"):
                yield Run(where, list(container["args"]), env=tuple(env.items()))


def cli_runs() -> list[Run]:
    return [run for run in [*compose_runs(), *k8s_runs()] if not run.entrypoint]


def parse_cli(run: Run) -> Any:
    try:
        return build_parser().parse_args(run.argv)
    except SystemExit as exc:
        pytest.fail(
            f"{run.where}: `brainhands {shlex.join(run.argv)}` is not a command the CLI "
            f"accepts (argparse exited {exc.code})"
        )


def deployment_args(doc: dict[str, Any]) -> Any:
    [run] = [
        Run(doc["metadata"]["name"], list(c["args"]))
        for c in pod_spec(doc)["containers"]
        if is_ours(c.get("image")) and c.get("args") and not c.get("command")
    ]
    return parse_cli(run)


def find_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


# --- the checks -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_parses(path: Path) -> None:
    try:
        docs = load_yaml(path)
    except yaml.YAMLError as exc:
        pytest.fail(f"{path.relative_to(ROOT)} is not valid YAML: {exc}")
    assert docs, f"{path.relative_to(ROOT)} holds no document"


def test_the_kustomization_lists_every_manifest_and_only_existing_ones() -> None:
    listed = set(kustomization()["resources"])
    present = {p.name for p in K8S.glob("*.y*ml")} - {"kustomization.yaml"}
    assert listed - present == set(), "kustomization.yaml lists files that do not exist"
    assert present - listed == set(), "manifests in deploy/k8s that kustomization.yaml omits"


def test_every_brainhands_variable_set_is_a_real_setting() -> None:
    known = {
        f"{cls.model_config.get('env_prefix', '')}{field}".upper()
        for cls in SETTINGS
        for field in cls.model_fields
    }
    sources: list[tuple[str, dict[str, str]]] = [
        ("deploy/Dockerfile ENV", dockerfile_env()),
        ("deploy/k8s ConfigMap/Secret", k8s_config()),
        *((f"compose {name}", compose_env(s)) for name, s in compose()["services"].items()),
    ]
    for file, doc in k8s_objects():
        if doc.get("kind") in {"Deployment", "Job"}:
            for c in containers(doc):
                sources.append((f"{file} {c['name']}", {e["name"]: "" for e in c.get("env") or []}))
    unknown = sorted(
        f"{where}: {name}"
        for where, env in sources
        for name in env
        if name.startswith("BRAINHANDS_") and name not in known
    )
    assert not unknown, (
        "variables that no settings class (CommonSettings, HandsSettings, BrainSettings, "
        f"ModelSettings, ApiSettings) reads: {unknown}"
    )


def test_every_setting_value_is_one_the_settings_accept() -> None:
    sources: list[tuple[str, dict[str, str]]] = [
        ("deploy/k8s ConfigMap/Secret", k8s_config()),
        *((f"compose {name}", compose_env(s)) for name, s in compose()["services"].items()),
    ]
    for file, doc in k8s_objects():
        if doc.get("kind") in {"Deployment", "Job"}:
            for c in containers(doc):
                env = {e["name"]: str(e.get("value", "")) for e in c.get("env") or []}
                sources.append((f"{file} {c['name']}", env))
    for where, env in sources:
        for cls in (HandsSettings, BrainSettings, ModelSettings, ApiSettings):
            prefix = str(cls.model_config.get("env_prefix", ""))
            values = {
                field: env[f"{prefix}{field}".upper()]
                for field in cls.model_fields
                if f"{prefix}{field}".upper() in env
            }
            if not values:
                continue
            try:
                cls.model_validate(values)  # the files' values alone: no environment read
            except ValidationError as exc:
                pytest.fail(f"{where}: {cls.__name__} rejects {sorted(values)}: {exc}")


def test_every_command_a_container_runs_is_a_real_cli_command() -> None:
    runs = cli_runs()
    assert {parse_cli(run).command for run in runs} >= {"migrate", "brain", "hands", "sweeper"}
    for run in runs:
        args = parse_cli(run)
        for option in ("tools", "tasks", "agents"):
            for module in getattr(args, option, None) or []:
                assert find_module(module), f"{run.where}: --{option} {module}: no such module"


def test_every_worker_would_start_with_its_modules() -> None:
    """What `brainhands hands` / `brain` check at start-up, before they connect anywhere."""
    for run in cli_runs():
        args = parse_cli(run)
        if args.command == "hands":
            registry = load_tool_modules(args.tools)
            serving = [
                t.name for t in registry if t.pool == args.pool and t.fn.__module__ in args.tools
            ]
            assert serving, (
                f"{run.where}: no tool of pool {args.pool!r} in {args.tools}: "
                "the worker would refuse to start"
            )
        elif args.command == "brain":
            agents = load_agent_modules(args.agents or [])
            tasks = load_task_modules(args.tasks or [])
            assert tasks.kinds or agents.agents, (
                f"{run.where}: a Brain with no task kind or agent would refuse to start"
            )


def test_every_python_command_line_names_modules_and_attributes_that_exist() -> None:
    """Entrypoint overrides (the example email service) and the python -c health checks."""
    lines = [run for run in [*compose_runs(), *k8s_runs()] if run.entrypoint]
    for name, service in compose()["services"].items():
        if not is_ours(service.get("image")):
            continue
        test = (service.get("healthcheck") or {}).get("test")
        if isinstance(test, list) and test[:1] == ["CMD"]:
            lines.append(Run(f"compose {name} healthcheck", test[1:], entrypoint=True))
    check = dockerfile_healthcheck()
    if check:
        lines.append(Run("deploy/Dockerfile HEALTHCHECK", check, entrypoint=True))
    assert lines
    for run in lines:
        assert run.argv[0] in {"python", "python3"}, f"{run.where}: unexpected {run.argv[0]}"
        if run.argv[1] == "-m":
            assert find_module(run.argv[2]), f"{run.where}: no module {run.argv[2]}"
        else:
            assert run.argv[1] == "-c", f"{run.where}: {run.argv}"
            check_snippet(run.where, run.argv[2])


def check_snippet(where: str, code: str) -> None:
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        pytest.fail(f"{where}: python -c code does not compile: {exc}")
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert find_module(alias.name), f"{where}: no module {alias.name}"
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            source = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(source, alias.name) or find_module(f"{node.module}.{alias.name}"), (
                    f"{where}: {node.module} has no {alias.name}"
                )
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module is not None and isinstance(node.ctx, ast.Load):
                assert hasattr(importlib.import_module(module), node.attr), (
                    f"{where}: {module}.{node.attr} does not exist"
                )


def test_keda_watches_the_queues_its_target_deployment_consumes() -> None:
    topology = Topology(namespace())
    deployments = {doc["metadata"]["name"]: doc for _, doc in k8s_of_kind("Deployment")}
    auths = {doc["metadata"]["name"]: doc for _, doc in k8s_of_kind("TriggerAuthentication")}
    secrets = {doc["metadata"]["name"]: doc for _, doc in k8s_of_kind("Secret")}
    scaled: set[str] = set()
    for _, obj in k8s_of_kind("ScaledObject"):
        target = obj["spec"]["scaleTargetRef"]
        where = f"ScaledObject {obj['metadata']['name']}"
        assert target.get("kind", "Deployment") == "Deployment", where
        assert target["name"] in deployments, f"{where}: no Deployment {target['name']}"
        scaled.add(target["name"])
        args = deployment_args(deployments[target["name"]])
        if args.command == "hands":
            consumed = {topology.hands_queue(args.pool)}
        else:
            assert args.command == "brain", (
                f"{where}: scales a {args.command}, not a queue consumer"
            )
            consumed = {q for compat in args.compat for q in topology.brain_queues(compat)}
        watched = set()
        for trigger in obj["spec"]["triggers"]:
            assert trigger["type"] == "rabbitmq", where
            meta = trigger["metadata"]
            assert meta["queueName"] in consumed, (
                f"{where} watches {meta['queueName']}, but {target['name']} consumes {consumed}"
            )
            assert meta.get("mode") == "QueueLength", where
            assert all(isinstance(v, str) for v in meta.values()), f"{where}: metadata not strings"
            assert isinstance(meta["value"], str) and float(meta["value"]) > 0, where
            watched.add(meta["queueName"])
            ref = trigger.get("authenticationRef")
            if ref is not None:
                auth = auths.get(ref["name"])
                assert auth is not None, f"{where}: no TriggerAuthentication {ref['name']}"
                for secret_ref in auth["spec"].get("secretTargetRef") or []:
                    secret = secrets.get(secret_ref["name"])
                    assert secret is not None, f"{where}: no Secret {secret_ref['name']}"
                    keys = {*(secret.get("stringData") or {}), *(secret.get("data") or {})}
                    assert secret_ref["key"] in keys, f"{where}: no key {secret_ref['key']}"
            else:
                assert "hostFromEnv" in meta or "host" in meta, f"{where}: no way to connect"
        assert watched == consumed, (
            f"{where}: queues consumed but not watched: {consumed - watched}"
        )
    consumers = {
        name
        for name, doc in deployments.items()
        if deployment_args(doc).command in {"hands", "brain"}
    }
    assert consumers - scaled == set(), "queue consumers that no ScaledObject scales"


def test_every_hands_pool_brain_and_api_deployment_has_a_disruption_budget() -> None:
    budgets = [
        doc["spec"]["selector"]["matchLabels"] for _, doc in k8s_of_kind("PodDisruptionBudget")
    ]
    for _, doc in k8s_of_kind("Deployment"):
        if deployment_args(doc).command not in {"hands", "brain", "api"}:
            continue
        labels = doc["spec"]["template"]["metadata"]["labels"]
        matching = [b for b in budgets if b.items() <= labels.items()]
        assert len(matching) == 1, f"{doc['metadata']['name']}: {len(matching)} PDBs select it"


def test_pods_outlive_the_shutdown_grace() -> None:
    value = config_map_value("BRAINHANDS_SHUTDOWN_GRACE")
    grace = (
        float(value)
        if value is not None
        else float(HandsSettings.model_fields["shutdown_grace"].default)
    )
    for _, doc in k8s_of_kind("Deployment"):
        period = pod_spec(doc).get("terminationGracePeriodSeconds")
        assert period is not None and period >= grace + DRAIN_MARGIN, (
            f"{doc['metadata']['name']}: terminationGracePeriodSeconds {period} leaves no time "
            f"after BRAINHANDS_SHUTDOWN_GRACE {grace}"
        )
    for name, service in compose()["services"].items():
        run = [r for r in compose_runs() if r.where == f"compose {name}" and not r.entrypoint]
        if not run or run[0].argv[0] not in WORKERS:
            continue
        env = compose_env(service)
        grace = float(
            env.get(
                "BRAINHANDS_SHUTDOWN_GRACE", HandsSettings.model_fields["shutdown_grace"].default
            )
        )
        period = duration(str(service.get("stop_grace_period", "10s")))
        assert period >= grace + DRAIN_MARGIN, (
            f"compose {name}: stop_grace_period {period}s, BRAINHANDS_SHUTDOWN_GRACE {grace}s"
        )


def duration(text: str) -> float:
    """Seconds in a compose duration such as ``30s``, ``1m30s`` or ``500ms``."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text}"
    return sum(float(n) * units[u] for n, u in parts)


def test_workers_are_probed_on_the_health_endpoints() -> None:
    config = k8s_config()
    for _, doc in k8s_of_kind("Deployment"):
        for c in pod_spec(doc)["containers"]:
            command = deployment_args(doc).command
            if not is_ours(c.get("image")) or command not in WORKERS:
                continue
            where = f"{doc['metadata']['name']}/{c['name']}"
            env = {**config, **{e["name"]: str(e.get("value", "")) for e in c.get("env") or []}}
            port = serving_port(command, env, where)
            live = c["livenessProbe"]["httpGet"]
            ready = c["readinessProbe"]["httpGet"]
            assert (live["path"], live["port"]) == ("/healthz", port), where
            assert (ready["path"], ready["port"]) == ("/readyz", port), where
            assert port in {p["containerPort"] for p in c.get("ports") or []}, where
            scrape = doc["spec"]["template"]["metadata"].get("annotations") or {}
            assert scrape.get("prometheus.io/port", str(port)) == str(port), where
    for run in compose_runs():
        if run.entrypoint or run.argv[0] not in WORKERS:
            continue
        service = compose()["services"][run.where.removeprefix("compose ")]
        test = " ".join(service["healthcheck"]["test"])
        port = serving_port(run.argv[0], dict(run.env), run.where)
        assert f"127.0.0.1:{port}/readyz" in test, run.where


def test_cpu_autoscalers_and_services_reach_their_deployments() -> None:
    """The API scales on CPU (an HPA), not on a queue, and is reached through a Service."""
    deployments = {doc["metadata"]["name"]: doc for _, doc in k8s_of_kind("Deployment")}
    keda = {doc["spec"]["scaleTargetRef"]["name"] for _, doc in k8s_of_kind("ScaledObject")}
    hpas = k8s_of_kind("HorizontalPodAutoscaler")
    for _, hpa in hpas:
        where = f"HorizontalPodAutoscaler {hpa['metadata']['name']}"
        assert hpa["apiVersion"] == "autoscaling/v2", where
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment" and target["name"] in deployments, where
        assert target["name"] not in keda, f"{where}: KEDA scales {target['name']} too"
        doc = deployments[target["name"]]
        assert "replicas" not in doc["spec"], f"{target['name']}: replicas fight the HPA"
        assert hpa["spec"]["minReplicas"] >= 2, f"{where}: one pod is no redundancy"
        for metric in hpa["spec"]["metrics"]:
            name = metric["resource"]["name"]
            for c in pod_spec(doc)["containers"]:
                assert name in c["resources"]["requests"], f"{where}: no {name} request"
    scaled = {doc["spec"]["scaleTargetRef"]["name"] for _, doc in hpas}
    api = {name for name, doc in deployments.items() if deployment_args(doc).command == "api"}
    assert api and api - scaled == set(), "API Deployments that no HPA scales"
    for _, service in k8s_of_kind("Service"):
        where = f"Service {service['metadata']['name']}"
        selector = service["spec"]["selector"]
        selected = [
            d
            for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, f"{where}: selects {len(selected)} Deployments, not 1"
        [doc] = selected
        ports = {p.get("name"): p["containerPort"] for c in containers(doc) for p in c["ports"]}
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert target in ports or target in ports.values(), f"{where}: no port {target}"


def test_pods_run_as_the_images_non_root_user_on_a_read_only_root() -> None:
    uid = image_user()
    for file, doc in k8s_objects():
        if doc.get("kind") not in {"Deployment", "Job"}:
            continue
        where = f"{file} {doc['metadata']['name']}"
        security = pod_spec(doc).get("securityContext") or {}
        assert security.get("runAsNonRoot") is True, where
        assert security.get("runAsUser") == uid, f"{where}: runAsUser is not the image's {uid}"
        for c in containers(doc):
            assert (c.get("securityContext") or {}).get("readOnlyRootFilesystem") is True, where


def test_compose_workers_can_be_scaled() -> None:
    services = compose()["services"]
    workers = [r for r in compose_runs() if not r.entrypoint and r.argv[0] in {"hands", "brain"}]
    assert any(r.argv[0] == "hands" for r in workers)
    for run in workers:
        service = services[run.where.removeprefix("compose ")]
        assert "container_name" not in service, f"{run.where}: a fixed container_name"
        assert "ports" not in service, f"{run.where}: host ports clash when scaled"


def image_user() -> int:
    users = [rest for word, rest in final_stage() if word == "USER"]
    assert users, "deploy/Dockerfile: the image runs as root (no USER)"
    user = users[-1].split(":")[0]
    assert user.isdigit(), f"deploy/Dockerfile: USER {user}: use a numeric uid (runAsNonRoot)"
    assert int(user) != 0, "deploy/Dockerfile: USER is root"
    return int(user)


def test_the_dockerfile_runs_brainhands_as_a_user_with_a_healthcheck() -> None:
    assert image_user() != 0
    check = dockerfile_healthcheck()
    assert check, "deploy/Dockerfile: no HEALTHCHECK"
    assert "/healthz" in " ".join(check)
    stage = final_stage()
    [entrypoint] = [exec_form(rest) for word, rest in stage if word == "ENTRYPOINT"]
    assert entrypoint == ["brainhands"]
    exposed = {p.split("/")[0] for word, rest in stage if word == "EXPOSE" for p in rest.split()}
    port = http_port(dockerfile_env(), "deploy/Dockerfile ENV")
    assert str(port) in exposed, f"deploy/Dockerfile: EXPOSE {exposed}, health port {port}"
    assert port == http_port(k8s_config(), "deploy/k8s ConfigMap")


def test_the_dockerfile_copies_every_distribution_and_builds_its_wheel() -> None:
    copied: set[str] = set()
    for word, rest in dockerfile_instructions():
        if word != "COPY" or "--from=" in rest:
            continue
        *sources, _ = shlex.split(rest)
        for source in sources:
            assert (ROOT / source).exists(), f"deploy/Dockerfile copies {source}: not in the repo"
            copied.add(source.rstrip("/"))
    folders = {p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("*/pyproject.toml")}
    assert folders == {"shared", "brain", "hands", "examples"}
    assert folders | {"src", "pyproject.toml", "hatch_build.py", "README.md"} <= copied
    [built] = [rest for word, rest in stages()["wheels"] if word == "RUN"]
    assert set(shlex.split(built)) >= {".", *(f"./{f}" for f in folders)}


@pytest.mark.parametrize(
    ("target", "installs", "entrypoint"),
    [
        ("hands", {"brainhands-core", "brainhands-hands"}, ["python", "-m", "brainhands.hands"]),
        ("brain", {"brainhands-core", "brainhands-brain"}, ["python", "-m", "brainhands.brain"]),
        ("all", {"brainhands", "brainhands-examples"}, ["brainhands"]),
    ],
)
def test_each_role_image_installs_its_own_distributions(
    target: str, installs: set[str], entrypoint: list[str]
) -> None:
    image = lineage(target)
    [copied] = [rest for word, rest in image if word == "COPY" and "--from=venv-" in rest]
    venv = copied.split()[0].removeprefix("--from=")
    [install] = [rest for word, rest in stages()[venv] if word == "RUN"]
    named = {w for w in shlex.split(install) if w.startswith("brainhands")}
    assert named == installs, f"the {target} image installs {named}"
    [last] = [exec_form(rest) for word, rest in image if word == "ENTRYPOINT"][-1:]
    assert last == entrypoint
    assert any(word == "USER" and rest.startswith("10001") for word, rest in image)
    assert any(word == "HEALTHCHECK" for word, rest in image)
