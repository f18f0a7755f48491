"""g4's Kubeflow Trainer v2 controller (v2.3.0, built from github.com/kubeflow/trainer/v2) beside the
local control plane: it starts once the lab's TrainJob CRD is applied, serves its webhooks on loopback,
and its own validating webhook refuses a TrainJob whose runtime does not exist."""

from __future__ import annotations

from localcluster.build import ensure
from stacks.stackfile import load_config
from tests.cluster.lab_cluster import lab_cluster


def test_the_trainer_controller_serves_its_webhooks_for_g4(tmp_path_factory):
    built = ensure(("kube", "kwok", "jobset", "trainer"))
    cfg = load_config("g4")
    with lab_cluster(built, cfg, tmp_path_factory.mktemp("cluster"),
                     crds=("kubeflow-trainer/v2.3.0", "jobset/v0.12.0")) as cluster:  # fmt: skip
        cluster.wait_for_controllers(["jobset", "trainer"])
        cluster.wait_for_service_account("default")
        job = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "no-runtime", "namespace": "default"},
            "spec": {"runtimeRef": {"name": "no-such-runtime"}},
        }
        answer = cluster.client.post("/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs", json=job)
        assert answer.status_code in (403, 422), answer.text
        message = answer.json()["message"]
        assert message.startswith('admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request'), message
        assert "no-such-runtime" in message, message
