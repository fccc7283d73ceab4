"""infra/k8s/: every KubeRay object is valid against the KubeRay v1.7.0 CRDs (unknown fields
refused, as `kubectl apply --validate=strict` does), the core objects against Kubernetes'
own schemas (kubernetes-validate, offline), every command a manifest runs parses with the
CLI's real parser, and the sizes match the config's `cluster:` section."""

from __future__ import annotations

import copy
import gzip
import importlib
import os
import re
import shlex
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from pipelines import __version__
from pipelines.cli import build_parser
from pipelines.cluster.command import check
from pipelines.cluster.serve_app import AppArgs, app
from pipelines.config import REPO_ROOT as REPO, load_config
from pipelines.errors import UserError
from pipelines.models.refs import parse_registry_ref

K8S = REPO / "infra" / "k8s"
# The CRDs KubeRay v1.7.0 ships (Apache-2.0), gzipped here so a clean clone has them;
# KUBERAY_CRDS names another folder of ray.io_*.yaml[.gz] files.
CRDS = Path(os.environ.get("KUBERAY_CRDS", Path(__file__).parent / "kuberay-v1.7.0"))
KUBERNETES = "1.33"
NOT_OBJECTS = {"kustomization.yaml", "config.yaml"}
CONFIG_DIR = "/etc/memagent"


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


OBJECTS = [(p.name, d) for p in sorted(K8S.glob("*.yaml")) if p.name not in NOT_OBJECTS for d in load_all(p)]
RAY = [(n, d) for n, d in OBJECTS if d["apiVersion"].startswith("ray.io/")]
CORE = [(n, d) for n, d in OBJECTS if not d["apiVersion"].startswith("ray.io/")]


def strict(schema: dict) -> dict:
    """The schema with unknown fields refused wherever the CRD lists the fields (the API
    server would silently prune a misspelt one)."""
    out = copy.copy(schema)
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [strict(s) for s in out[key]]
    return out


@pytest.fixture(scope="module")
def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict openAPIV3Schema, from the CRD files KubeRay v1.7.0 ships."""
    assert CRDS.is_dir(), f"KubeRay CRDs not found at {CRDS} (set KUBERAY_CRDS)"
    out = {}
    for path in sorted(CRDS.glob("ray.io_*.yaml*")):
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            out[key] = strict(version["schema"]["openAPIV3Schema"])
    return out


def test_the_manifests_hold_each_object_once():
    kinds = sorted(d["kind"] for _, d in OBJECTS)
    assert kinds == ["ConfigMap", "RayCronJob", "RayJob", "RayService", "Secret", "Secret", "Secret"]


@pytest.mark.parametrize("name,doc", RAY, ids=[d["kind"] for _, d in RAY])
def test_kuberay_objects_match_the_crds(crd_schemas, name, doc):
    schema = crd_schemas[(doc["apiVersion"], doc["kind"])]
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_a_misspelt_field_is_refused(crd_schemas):
    """The strict schema is what catches a typo: the CRD alone would accept it."""
    name, doc = next((n, d) for n, d in RAY if d["kind"] == "RayJob")
    bad = copy.deepcopy(doc)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2
    errors = list(jsonschema.Draft7Validator(crd_schemas[("ray.io/v1", "RayJob")]).iter_errors(bad))
    assert any("'replica'" in e.message for e in errors)


@pytest.mark.parametrize("name,doc", CORE, ids=[f"{d['kind']}/{d['metadata']['name']}" for _, d in CORE])
def test_core_objects_match_kubernetes_schemas(name, doc):
    try:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{name}: {e}")


def containers(doc: dict) -> list[dict]:
    """Every container of every pod template in a Ray object."""
    spec = doc["spec"].get("jobTemplate") or doc["spec"]
    cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig")
    groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
    return [(g, c) for g in groups for c in g["template"]["spec"]["containers"]]


def training_groups(doc: dict) -> dict[str, dict]:
    spec = doc["spec"].get("jobTemplate") or doc["spec"]
    return {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}


def entrypoints() -> list[tuple[str, list[str]]]:
    """(manifest, argv) of every `memagent ...` command a RayJob or RayCronJob runs."""
    out = []
    for name, doc in RAY:
        spec = doc["spec"].get("jobTemplate") or doc["spec"]
        out += [(name, shlex.split(command)) for command in spec.get("entrypoint", "").split("&&") if command.strip()]
    return out


def test_jobs_run_ingest_then_train():
    commands = {name: [argv[3] for argv in [a for n, a in entrypoints() if n == name]] for name, _ in RAY}
    assert commands["rayjob-train.yaml"] == ["ingest", "train"]
    assert commands["raycronjob-continuous.yaml"] == ["ingest", "train"]


@pytest.mark.parametrize("name,argv", entrypoints(), ids=[f"{n}:{a[3]}" for n, a in entrypoints()])
def test_every_command_parses_with_the_cli(capsys, name, argv):
    assert argv[0] == "memagent", f"{name}: runs {argv[0]}, not memagent"
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit:
        args = None
    if args is None:
        pytest.fail(f"{name}: {shlex.join(argv)}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert args.config.startswith(CONFIG_DIR + "/") and args.overrides == []


def test_the_cron_job_trains_continuously():
    trains = [a for n, a in entrypoints() if n == "raycronjob-continuous.yaml" and a[3] == "train"]
    assert trains and "--continuous" in trains[0]


def test_the_service_serves_the_production_version(site_cfg):
    doc = next(d for _, d in RAY if d["kind"] == "RayService")
    serve = yaml.safe_load(doc["spec"]["serveConfigV2"])
    (application,) = serve["applications"]
    module, attr = application["import_path"].split(":")
    assert callable(getattr(importlib.import_module(module), attr))
    args = AppArgs.model_validate(application["args"])
    assert args.config.startswith(CONFIG_DIR + "/")
    assert parse_registry_ref(args.model).alias == "production"
    assert application["name"] == site_cfg.serve.app_name


def test_settings_come_from_secrets_and_configmaps_that_exist():
    defined = {(d["kind"], d["metadata"]["name"]) for _, d in CORE}
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    defined |= {("ConfigMap", g["name"]) for g in kustomization["configMapGenerator"]}
    env_keys = next(d["data"] for _, d in CORE if d["metadata"]["name"] == "memagent-env")
    for name, doc in RAY:
        for group, c in containers(doc):
            assert "env" not in c, f"{name}: {c['name']} sets env inline; use the ConfigMap or a Secret"
            for ref in c["envFrom"]:
                kind = "ConfigMap" if "configMapRef" in ref else "Secret"
                target = ref.get("configMapRef") or ref["secretRef"]
                assert (kind, target["name"]) in defined, f"{name}: {kind} {target['name']} is not defined"
            names = {(r.get("configMapRef") or r.get("secretRef"))["name"] for r in c["envFrom"]}
            assert {"memagent-env", "memagent-s3"} <= names, f"{name}: {c['name']} lacks the S3 settings"
            volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert volumes[mounts[CONFIG_DIR]]["configMap"]["name"] == "memagent-config"
        spec = doc["spec"].get("jobTemplate") or doc["spec"]
        for var in re.findall(r"\$\{?(\w+)", spec.get("entrypoint", "")):
            assert var in env_keys, f"{name}: ${var} is not a key of ConfigMap memagent-env"


def test_the_image_and_the_config_file_are_kustomize_parameters():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert all((K8S / r).is_file() for r in kustomization["resources"])
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
    (image,) = kustomization["images"]
    (generated,) = kustomization["configMapGenerator"]
    assert [Path(f).name for f in generated["files"]] == ["config.yaml"] and (K8S / "config.yaml").is_file()
    for name, doc in RAY:
        assert name in kustomization["resources"]
        assert {c["image"] for _, c in containers(doc)} == {image["name"]}, name


def test_the_image_and_ray_are_the_pinned_ones():
    """Every pod runs the image `make image` tags (memagent:VERSION, infra/image/Dockerfile.gpu)
    on the Ray release the images install, which is the base image's too."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert image["newName"].rsplit("/", 1)[-1] == "memagent" and image["newTag"] == __version__
    assert 'TAG="memagent:$VERSION"' in (REPO / "infra" / "image" / "build.sh").read_text()
    pins = dict(line.split("==", 1) for line in (REPO / "infra" / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name, doc in RAY:
        spec = doc["spec"].get("jobTemplate") or doc["spec"]
        cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig")
        assert cluster["rayVersion"] == pins["ray"], name
    base = re.search(r"^ARG BASE=(\S+)", (REPO / "infra" / "image" / "Dockerfile.gpu").read_text(), re.M).group(1)
    assert base.split(":")[-1].startswith(f"{pins['ray']}-"), base


@pytest.fixture
def site_cfg(tmp_path):
    """infra/k8s/config.yaml, copied outside the checkout: its base is a packaged preset, by name."""
    (tmp_path / "config.yaml").write_text((K8S / "config.yaml").read_text())
    return load_config(tmp_path / "config.yaml")


def test_the_site_config_passes_the_check(site_cfg):
    result = check(site_cfg)
    assert result["ok"], result["problems"]


@pytest.mark.parametrize("name", ["rayjob-train.yaml", "raycronjob-continuous.yaml"])
def test_training_clusters_have_the_config_groups(site_cfg, name):
    """Rollout and learner in separate GPU groups, sized as `config check` assumed them."""
    c = site_cfg.cluster
    groups = training_groups(next(d for n, d in RAY if n == name))
    assert c.rollout_group != c.learner_group and set(groups) == set(c.groups)
    for group_name, g in c.groups.items():
        spec = groups[group_name]
        limits = spec["template"]["spec"]["containers"][0]["resources"]["limits"]
        gpus = c.gpus_per_node if g.gpus_per_node is None else g.gpus_per_node
        assert spec["replicas"] == spec["minReplicas"] == spec["maxReplicas"] == g.nodes, group_name
        assert int(limits["nvidia.com/gpu"]) == gpus > 0, group_name
        assert float(limits["cpu"]) == (g.cpus_per_node or c.cpus_per_node), group_name


def test_the_serve_builder_needs_the_token(site_cfg, tmp_path, monkeypatch):
    config = str(tmp_path / "config.yaml")
    monkeypatch.delenv("MEMAGENT_SERVE_TOKEN", raising=False)
    with pytest.raises(UserError, match="bearer token is required"):
        app({"config": config, "model": "models:/memagent@production"})
    monkeypatch.setenv("MEMAGENT_SERVE_TOKEN", "a-token-from-the-secret")
    from ray.serve import Application

    assert isinstance(app({"config": config, "model": "models:/memagent@production"}), Application)
    with pytest.raises(UserError, match="'modle'"):
        app({"config": config, "modle": "x"})
