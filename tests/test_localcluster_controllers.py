"""The local controllers' wiring, without starting them: which labs run which controller, the
Configuration each gets (the lab's own Kueue settings kept, only the local fields changed), and the
webhook configurations pointed at loopback. The controllers themselves run in `make test-cluster`."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
import yaml

from components.kueue import manager_config
from components.versions import JOBSET, KUBEFLOW_TRAINER, KUEUE
from localcluster import controllers as lc
from localcluster import nodes
from stacks.compose_platform import kueue_args
from stacks.stackfile import load_config

GOMOD = Path(__file__).resolve().parents[1] / "localcluster" / "gomod"
PORTS = lc.Ports(webhook=40001, health=40002, extra=40003)

# Two webhooks in the shape controller-gen writes into config/components/webhook/manifests.yaml
# (Kueue v0.19.2's first mutating and a validating one, abridged to the fields that matter here).
MANIFESTS = """\
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions:
  - v1
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /mutate-jobset-x-k8s-io-v1alpha2-jobset
  failurePolicy: Fail
  name: mjobset.kb.io
  rules:
  - apiGroups:
    - jobset.x-k8s.io
    apiVersions:
    - v1alpha2
    operations:
    - CREATE
    resources:
    - jobsets
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions:
  - v1
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue
  failurePolicy: Fail
  name: vclusterqueue.kb.io
  rules:
  - apiGroups:
    - kueue.x-k8s.io
    apiVersions:
    - v1beta2
    operations:
    - CREATE
    - UPDATE
    resources:
    - clusterqueues
  sideEffects: None
"""


@pytest.mark.parametrize(
    ("stack", "expected"),
    [("g3", ["jobset", "kueue"]), ("g4", ["jobset", "trainer"]), ("g1", []), ("g6", [])],
)
def test_each_lab_runs_the_controllers_its_features_need(stack, expected):
    assert [c.name for c in lc.needed(load_config(stack))] == expected


def test_kueue_keeps_the_labs_settings_and_changes_only_the_local_fields(tmp_path):
    cfg = load_config("g3")
    lab = yaml.safe_load(manager_config(kueue_args(cfg, nodes.PLACEMENT)))
    local = lc.kueue_configuration(cfg, PORTS, tmp_path)
    # What g3 measures depends on these: they must be the lab's, not defaults.
    for key in ("waitForPodsReady", "integrations", "controller", "clientConnection", "apiVersion", "kind"):
        assert local[key] == lab[key], key
    assert local["waitForPodsReady"]["blockAdmission"] is cfg.kueue.block_admission
    assert local["webhook"] == {"port": 40001, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert local["health"] == {"healthProbeBindAddress": "127.0.0.1:40002"}
    assert local["visibilityServer"] == {"bindAddress": "127.0.0.1", "bindPort": 40003}
    assert local["leaderElection"] == {"leaderElect": False}
    # Its rotator on (0.19.2 exits without it), reading the Secret LabControllers writes.
    assert local["internalCertManagement"] == {
        "enable": True, "webhookServiceName": "kueue-webhook-service", "webhookSecretName": "kueue-webhook-server-cert"}
    assert local["namespace"] == "kueue-system"


def test_jobset_and_trainer_serve_on_loopback_without_their_own_certificates(tmp_path):
    js = lc.jobset_configuration(PORTS, tmp_path)
    assert js["webhook"] == {"port": 40001, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert js["internalCertManagement"] == {"enable": False} and js["leaderElection"] == {"leaderElect": False}
    tr = lc.trainer_configuration(PORTS)
    assert tr["webhook"] == {"port": 40001, "host": "127.0.0.1"} and tr["certManagement"] == {"enable": False}
    assert tr["statusServer"] == {"port": 40003}


def test_webhooks_point_at_loopback_with_our_ca_and_keep_everything_else():
    docs = lc.loopback_webhooks(MANIFESTS, "kueue", 40001, b"-----BEGIN CERTIFICATE-----\nabc\n")
    assert [d["metadata"]["name"] for d in docs] == [
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    ]
    hooks = [h for d in docs for h in d["webhooks"]]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:40001/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:40001/validate-kueue-x-k8s-io-v1beta2-clusterqueue",
    ]
    assert {base64.b64decode(h["clientConfig"]["caBundle"]) for h in hooks} == {b"-----BEGIN CERTIFICATE-----\nabc\n"}
    assert all("service" not in h["clientConfig"] for h in hooks)
    original = [h for d in yaml.safe_load_all(MANIFESTS) for h in d["webhooks"]]
    for ours, theirs in zip(hooks, original):
        assert {k: v for k, v in ours.items() if k != "clientConfig"} == {k: v for k, v in theirs.items() if k != "clientConfig"}


def test_a_webhook_without_a_service_reference_is_refused():
    broken = MANIFESTS.replace("    service:\n      name: webhook-service\n      namespace: system\n      path: /mutate-jobset-x-k8s-io-v1alpha2-jobset\n",
                               "    url: https://example.invalid/x\n")  # fmt: skip
    with pytest.raises(lc.ControllerError, match="mjobset.kb.io of kueue has no service reference"):
        lc.loopback_webhooks(broken, "kueue", 40001, b"ca")


@pytest.mark.parametrize(
    ("module", "go_module", "chart"),
    [("kueue", "sigs.k8s.io/kueue", KUEUE), ("jobset", "sigs.k8s.io/jobset", JOBSET),
     ("trainer", "github.com/kubeflow/trainer/v2", KUBEFLOW_TRAINER)],
)  # fmt: skip
def test_each_build_module_builds_the_version_the_charts_deploy(module, go_module, chart):
    """The controller built locally is the one the lab's chart deploys on GKE (components/versions.py)."""
    text = (GOMOD / module / "go.mod").read_text()
    found = re.search(rf"^\s*{re.escape(go_module)} (v\S+)", text, re.MULTILINE)
    assert found, f"{go_module} not required in localcluster/gomod/{module}/go.mod"
    assert found[1] == f"v{chart.version.lstrip('v')}"
    assert re.search(rf"^tool {re.escape(go_module)}", text, re.MULTILINE)
