"""g4: PyTorchJob builder against the upstream CRD, rendezvous evidence parsed from logs, cleanPodPolicy."""

from __future__ import annotations

import json

import pytest
import schemas
from labs_fakes import FakeCluster, fixture_outputs, live_args, recording_path

from benchmarks.labs import g4, live
from benchmarks.labs.record import Recording, load_recording


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g4"))


def test_pytorchjob_and_script_configmap_validate():
    outputs = fixture_outputs("g4")
    cm, job = g4.build_workloads(outputs, "g4-0000-abcd")
    schemas.validate_object(cm)
    schemas.validate_object(job)
    training = outputs["benchmark"]["training"]
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == training["clean_pod_policy"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] + replicas["Worker"]["replicas"] == training["workers"]
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"  # the operator injects RANK/WORLD_SIZE only into this name
    assert "dist.all_reduce" in cm["data"]["rendezvous.py"]


def test_recorded_objects_have_the_api_shapes(rec):
    for obj in [o for s in rec.snapshots for v in s.objects.values() for o in v] + rec.events:
        schemas.validate_object(obj)


def test_parse_log_reads_both_lines_and_ignores_noise():
    text = (
        "W1129 17:07:40.1 some torch warning\n"
        "rendezvous rank=1 world_size=2 backend=gloo host=h master=m-0:23456 cuda=False\n"
        "all_reduce rank=1 sum=3 expected=3\n"
    )
    r = g4.parse_log("p", text)
    assert (r.rank, r.world_size, r.master, r.cuda, r.all_reduce_sum) == (1, 2, "m-0:23456", False, 3.0)
    assert g4.parse_log("p", "Traceback (most recent call last):\n") is None


def test_rendezvous_of_two_ranks_passes(rec):
    result = g4.measure(rec)
    assert result.passed, result.checks
    assert [r.rank for r in result.ranks] == [0, 1]
    assert len(result.nodes_used) == 1


def test_a_missing_rank_fails_the_rendezvous_check(rec):
    raw = json.loads(rec.model_dump_json())
    raw["logs"] = {k: v for k, v in raw["logs"].items() if k.endswith("master-0")}
    result = g4.measure(Recording.model_validate(raw))
    assert not result.checks[0].passed


@pytest.mark.parametrize(
    "policy, phases, left",
    [("None", ["Succeeded", "Running"], ["a", "b"]), ("Running", ["Succeeded", "Running"], ["a"]), ("All", ["Succeeded"], [])],
)
def test_expected_remaining_follows_the_policy(policy, phases, left):
    pods = [{"metadata": {"name": n}, "status": {"phase": ph}} for n, ph in zip("ab", phases)]
    assert g4.expected_remaining(policy, pods) == left


def test_pods_left_that_policy_all_should_have_deleted_fail(rec):
    raw = json.loads(rec.model_dump_json())
    raw["outputs"]["benchmark"]["training"]["clean_pod_policy"] = "All"
    result = g4.measure(Recording.model_validate(raw))
    assert not result.checks[-1].passed


def test_failure_after_create_cleans_the_job_and_configmap(tmp_path):
    def on_list(api_version, kind, namespace, selector):
        raise RuntimeError("connection reset")

    cluster = FakeCluster(on_list)
    with pytest.raises(RuntimeError):
        live.run(g4, live_args(tmp_path, settle=0.0), cluster=cluster, outputs=fixture_outputs("g4"))
    assert [d[1] for d in cluster.deleted] == ["PyTorchJob", "ConfigMap", "Pod"]
