"""`pulumi up` and `pulumi destroy` through the real engine and provider against the local API server,
with a program of the test's own: a namespace and a ConfigMap in it."""

from __future__ import annotations

import json

import pulumi
import pulumi_kubernetes as k8s
import pytest
from localcluster.engine import stack
from kubernetes import client
from kubernetes.client.exceptions import ApiException


@pytest.mark.usefixtures("built")  # the Pulumi CLI and the provider on PATH
def test_a_program_goes_up_and_comes_down_through_the_real_engine(control_plane, api, tmp_path):
    kubeconfig = control_plane.kubeconfig.read_text()

    def program() -> None:
        provider = k8s.Provider("local", kubeconfig=kubeconfig)
        opts = pulumi.ResourceOptions(provider=provider)
        namespace = k8s.core.v1.Namespace("smoke", metadata={"name": "engine-smoke"}, opts=opts)
        answer = k8s.core.v1.ConfigMap(
            "answer", metadata={"name": "answer", "namespace": namespace.metadata.name}, data={"answer": "42"}, opts=opts
        )
        pulumi.export("uid", answer.metadata.uid)

    smoke = stack("smoke", "engine-smoke", program, tmp_path)
    up = smoke.up(on_output=print)
    assert up.summary.result == "succeeded"
    assert up.summary.resource_changes == {"create": 4}  # the stack, the provider, the namespace, the ConfigMap
    live = client.CoreV1Api(api).read_namespaced_config_map("answer", "engine-smoke")
    assert live.data == {"answer": "42"} and live.metadata.uid == up.outputs["uid"].value

    # The state names the provider plugin the engine ran: ours, found on PATH.
    state = smoke.export_stack().deployment
    assert any(r["type"] == "pulumi:providers:kubernetes" for r in state["resources"]), json.dumps(state)[:500]

    down = smoke.destroy(on_output=print)
    assert down.summary.result == "succeeded"
    with pytest.raises(ApiException) as gone:
        client.CoreV1Api(api).read_namespace("engine-smoke")
    assert gone.value.status == 404
