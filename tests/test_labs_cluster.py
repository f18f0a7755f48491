"""The thin cluster layer: run labels on objects and their pod templates, cleanup on every way out,
waits with deadlines; and the pure readers of cluster facts (Helm releases, warnings)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal

import pytest
from labs_fakes import FakeCluster

from benchmarks.cluster import RUN_LABEL, RunScope, WaitTimeout, wait_until, with_labels
from benchmarks.harness.signals import Interrupted
from benchmarks.kube.record import helm_chart_versions, warning_summary


def test_labels_reach_nested_pod_templates():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", "labels": {"keep": "me"}},
           "spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {}}}, "Worker": {"template": {"spec": {}}}}}}
    with_labels(job, {RUN_LABEL: "r1"})
    assert job["metadata"]["labels"] == {"keep": "me", RUN_LABEL: "r1"}
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["metadata"]["labels"] == {RUN_LABEL: "r1"}


def test_cleanup_deletes_every_kind_newest_first_and_survives_a_failing_delete():
    class Flaky(FakeCluster):
        def delete_labelled(self, api_version, kind, namespace, selector):
            super().delete_labelled(api_version, kind, namespace, selector)
            if kind == "Job":
                raise RuntimeError("etcd timeout")

    cluster, lines = Flaky(), []
    with pytest.raises(ValueError):
        with RunScope(cluster, "r1", "g3", lines.append) as scope:
            scope.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}})
            scope.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}, "spec": {}})
            raise ValueError("the run failed")
    assert [(d[1], d[2]) for d in cluster.deleted] == [("Job", "ns"), ("ConfigMap", "ns"), ("Pod", "ns")]
    assert all(d[3] == f"{RUN_LABEL}=r1" for d in cluster.deleted)
    assert any("FAILED to delete Job" in line for line in lines)


def test_sigterm_becomes_an_exception_that_still_cleans_up():
    cluster, before = FakeCluster(), signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted):
        with RunScope(cluster, "r2", "g1", lambda _: None) as scope:
            scope.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {}})
            os.kill(os.getpid(), signal.SIGTERM)
    assert cluster.deleted and signal.getsignal(signal.SIGTERM) == before


def test_a_second_sigterm_during_cleanup_does_not_stop_it():
    """A runner that stops a job sends SIGTERM and may repeat it: the repeat lands in cleanup, which
    must still delete every kind (the pods hold the GPU)."""

    class Repeats(FakeCluster):
        def delete_labelled(self, api_version, kind, namespace, selector):
            super().delete_labelled(api_version, kind, namespace, selector)
            if len(self.deleted) == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    cluster, before = Repeats(), signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted):
        with RunScope(cluster, "r3", "g8", lambda _: None) as scope:
            scope.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}})
            scope.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}, "spec": {}})
            os.kill(os.getpid(), signal.SIGTERM)
    assert [d[1] for d in cluster.deleted] == ["Job", "ConfigMap", "Pod"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_wait_until_times_out_with_the_last_state():
    clock = iter(range(0, 100, 10))
    with pytest.raises(WaitTimeout, match="pods ready: not done after 30s; last seen: 2 pending"):
        wait_until("pods ready", lambda: 2, lambda v: False, 30, progress=lambda _: None,
                   describe=lambda v: f"{v} pending", clock=lambda: next(clock), sleep=lambda _: None)


def _helm_secret(name: str, revision: int, status: str, chart: str, version: str) -> dict:
    release = {"name": name, "version": revision, "info": {"status": status},
               "chart": {"metadata": {"name": chart, "version": version, "appVersion": version}}}
    payload = base64.b64encode(base64.b64encode(gzip.compress(json.dumps(release).encode()))).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {"name": f"sh.helm.release.v1.{name}.v{revision}", "namespace": "x",
                         "labels": {"owner": "helm", "name": name, "status": status, "version": str(revision)}},
            "data": {"release": payload}}


def test_helm_chart_versions_from_release_secrets():
    secrets = [
        _helm_secret("kueue", 1, "superseded", "kueue", "0.19.1"),
        _helm_secret("kueue", 2, "deployed", "kueue", "0.19.2"),
        _helm_secret("kps", 1, "deployed", "kube-prometheus-stack", "88.5.3"),
        {"metadata": {"name": "other", "labels": {}}, "data": {}},
    ]
    assert helm_chart_versions(secrets) == {"kps": "kube-prometheus-stack-88.5.3", "kueue": "kueue-0.19.2"}


def test_warning_summary_groups_repeats_oldest_first():
    def ev(name, reason, t, count=1):
        return {"type": "Warning", "reason": reason, "message": f"{reason} of {name}", "count": count,
                "involvedObject": {"kind": "Pod", "name": name}, "lastTimestamp": t}

    lines = warning_summary([ev("b", "BackOff", "2026-11-29T17:05:00Z"), ev("a", "FailedScheduling", "2026-11-29T17:01:00Z", 3),
                             ev("a", "FailedScheduling", "2026-11-29T17:02:00Z", 2),
                             {"type": "Normal", "reason": "Pulled", "involvedObject": {"kind": "Pod", "name": "a"}}])
    assert lines == ["17:01:00 Pod/a FailedScheduling (x5): FailedScheduling of a", "17:05:00 Pod/b BackOff (x1): BackOff of b"]
