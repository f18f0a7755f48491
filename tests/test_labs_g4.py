"""g4: the TrainJob (Trainer v2.3.0) and PyTorchJob (v1) builders against their upstream CRDs, rendezvous
evidence parsed from logs, and clean-up: a TrainJob's pods stay until it is deleted, then go with its
JobSet; a PyTorchJob's as cleanPodPolicy says."""

from __future__ import annotations

import json

import pytest
import schemas
from labs_fakes import FakeCluster, fixture_outputs, live_args, recording_path

from benchmarks.cluster import Gone
from benchmarks.kube.record import Recording, load_recording
from benchmarks.labs import g4, live


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g4"))  # trainer-v2, the default


@pytest.fixture(scope="module")
def rec_v1() -> Recording:
    return load_recording(recording_path("g4-v1"))


def test_trainjob_validates_and_asks_the_runtime_for_two_single_rank_nodes():
    outputs = fixture_outputs("g4")
    cm, account, job = g4.build_workloads(outputs, "g4-0000-abcd")
    for obj in (cm, account):
        schemas.validate_object(obj)
    schemas.validate_object(job)  # against trainer.kubeflow.org_trainjobs.yaml of v2.3.0
    training = outputs["benchmark"]["training"]
    assert job["kind"] == "TrainJob" and job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"}
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == training["workers"] == 2 and trainer["numProcPerNode"] == 1
    assert trainer["command"] == ["torchrun", "/scripts/rendezvous.py"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "1"
    # The torch plugin refuses a TrainJob that sets its PET_* variables itself.
    assert not [e for e in trainer["env"] if e["name"].startswith("PET_")]
    (patch,) = job["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    # The runtime's job and container are both named "node": the patch must name them so.
    assert node["name"] == "node" and [c["name"] for c in pod["containers"]] == ["node"]
    assert pod["tolerations"] == outputs["gpu_pool"]["tolerations"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # No API token in the pods: their ServiceAccount mounts none (a patch cannot say so itself).
    assert pod["serviceAccountName"] == account["metadata"]["name"] and account["automountServiceAccountToken"] is False
    assert {"name": "scripts", "configMap": {"name": cm["metadata"]["name"]}} in pod["volumes"]


def test_pytorchjob_and_script_configmap_validate():
    outputs = fixture_outputs("g4-v1")
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


@pytest.mark.parametrize("fixture", ["g4", "g4-v1"])
def test_recorded_objects_have_the_api_shapes(fixture):
    recording = load_recording(recording_path(fixture))
    for obj in [o for s in recording.snapshots for v in s.objects.values() for o in v] + recording.events:
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


@pytest.mark.parametrize("fixture", ["g4", "g4-v1"])
def test_rendezvous_of_two_ranks_passes(fixture):
    result = g4.measure(load_recording(recording_path(fixture)))
    assert result.passed, result.checks
    assert [r.rank for r in result.ranks] == [0, 1]
    assert len(result.nodes_used) == 1
    # The seed's words: one node is a rendezvous demonstration.
    assert "**a rendezvous demo, not distributed training**" in g4.report_body(result)


def test_a_missing_rank_fails_the_rendezvous_check(rec):
    raw = json.loads(rec.model_dump_json())
    raw["logs"] = {k: v for k, v in raw["logs"].items() if "-node-0-0-" in k}
    result = g4.measure(Recording.model_validate(raw))
    assert not result.checks[0].passed


def test_the_trainjob_s_clean_up_is_timed_between_two_looks(rec):
    result = g4.measure(rec)
    # The fixture's delete at 17:08:32.1; pods still there (terminating) at 17:08:37.1, gone at 17:08:42.2.
    assert (result.cleanup_last_seen_seconds, result.cleanup_seconds) == (5.0, 10.1)
    assert result.pods_remaining == result.expected_remaining == result.pods_at_completion
    assert "between 5s and 10s after the TrainJob was deleted" in g4.report_body(result)


def test_pods_gone_before_the_trainjob_was_deleted_fail_the_keep_check(rec):
    raw = json.loads(rec.model_dump_json())
    before_delete = raw["client"]["deleted_snapshot"] - 1
    raw["snapshots"][before_delete]["objects"]["pods"] = raw["snapshots"][before_delete]["objects"]["pods"][:1]
    result = g4.measure(Recording.model_validate(raw))
    assert not result.checks[3].passed and "keeps its pods" in result.checks[3].name


def test_pods_that_outlive_their_trainjob_fail_the_clean_up_check(rec):
    raw = json.loads(rec.model_dump_json())
    raw["snapshots"] = raw["snapshots"][:-1]  # the last look still saw the terminating pods
    result = g4.measure(Recording.model_validate(raw))
    assert not result.checks[-1].passed and result.cleanup_seconds is None
    assert "still there at the last look: 1 JobSet(s)" in result.checks[-1].evidence


@pytest.mark.parametrize(
    "policy, phases, left",
    [("None", ["Succeeded", "Running"], ["a", "b"]), ("Running", ["Succeeded", "Running"], ["a"]), ("All", ["Succeeded"], [])],
)
def test_expected_remaining_follows_the_policy(policy, phases, left):
    pods = [{"metadata": {"name": n}, "status": {"phase": ph}} for n, ph in zip("ab", phases)]
    assert g4.expected_remaining(policy, pods) == left


def test_pods_left_that_policy_all_should_have_deleted_fail(rec_v1):
    raw = json.loads(rec_v1.model_dump_json())
    raw["outputs"]["benchmark"]["training"]["clean_pod_policy"] = "All"
    result = g4.measure(Recording.model_validate(raw))
    assert not result.checks[-1].passed


@pytest.mark.parametrize("fixture, kinds", [("g4", ["TrainJob", "ServiceAccount"]), ("g4-v1", ["PyTorchJob"])])
def test_failure_after_create_cleans_the_job_and_configmap(tmp_path, fixture, kinds):
    def on_list(api_version, kind, namespace, selector):
        raise RuntimeError("connection reset")

    cluster = FakeCluster(on_list)
    with pytest.raises(RuntimeError):
        live.run(g4, live_args(tmp_path, settle=0.0), cluster=cluster, outputs=fixture_outputs(fixture))
    assert [d[1] for d in cluster.deleted] == [*kinds, "ConfigMap", "Pod"]


def test_a_trainjob_run_deletes_the_trainjob_and_waits_for_its_jobset_and_pods(tmp_path, rec):
    """The live flow against the fixture's own objects: complete, settle, delete, gone."""
    done = rec.snapshots[rec.client["completion_snapshot"]].objects
    cluster = FakeCluster()
    deleted = lambda: any(d[1] == "TrainJob" for d in cluster.deleted)  # noqa: E731

    def on_list(api_version, kind, namespace, selector):
        key = {"TrainJob": "trainjobs", "JobSet": "jobsets", "Pod": "pods"}.get(kind)
        return [] if deleted() or key is None else done[key]

    cluster.on_list = on_list
    cluster.on_log = lambda namespace, name, container: rec.logs.get(name, "")
    assert live.run(g4, live_args(tmp_path, settle=0.0), cluster=cluster, outputs=rec.outputs) == 0
    (saved,) = tmp_path.glob("*/result.json")
    result = json.loads(saved.read_text())
    assert result["api"] == "trainer-v2" and result["cleanup_seconds"] is not None
    # The TrainJob is deleted by the benchmark (the clean-up it measures), then swept with the rest.
    assert [d[1] for d in cluster.deleted][:1] == ["TrainJob"]


def test_a_pod_gone_between_its_listing_and_its_log_read_keeps_the_log_read_before(tmp_path, rec):
    """On a real node the TrainJob's deletion takes its finished pods at once: the look that still lists one
    finds no log (HTTP 404). The run goes on with the log it read before (the first local run stopped here)."""
    done = rec.snapshots[rec.client["completion_snapshot"]].objects
    cluster = FakeCluster()
    deleted = lambda: any(d[1] == "TrainJob" for d in cluster.deleted)  # noqa: E731
    listed_after = []

    def on_list(api_version, kind, namespace, selector):
        key = {"TrainJob": "trainjobs", "JobSet": "jobsets", "Pod": "pods"}.get(kind)
        if key is None or (deleted() and (kind != "Pod" or listed_after)):
            return []
        listed_after.extend([kind] if deleted() else [])
        return done[key]

    def on_log(namespace, name, container):
        if deleted():
            raise Gone(f"reading the log of pod {namespace}/{name} failed: HTTP 404 Not Found")
        return rec.logs.get(name, "")

    cluster.on_list, cluster.on_log = on_list, on_log
    assert live.run(g4, live_args(tmp_path, settle=0.0), cluster=cluster, outputs=rec.outputs) == 0
    assert listed_after == ["Pod"]  # the pods were listed once with their TrainJob gone
    (saved,) = tmp_path.glob("*/result.json")
    assert [r["rank"] for r in json.loads(saved.read_text())["ranks"]] == [0, 1]


def test_the_shipped_recording_has_the_shapes_the_real_trainer_jobset_and_kubelet_wrote():
    """examples/g4 comes from a hand-made fixture; examples/g4-real-node from a real run of `make lab-local
    LAB=g4` (Trainer v2.3.0, JobSet 0.12.0, a real kubelet running both ranks). Every condition the real
    components wrote there is in the fixture, which shows more only where GKE's pool at zero differs (the
    first look finds no GPU node, then the pods wait for their image: the stand-in is there at once). That
    comparison corrected the fixture: the kubelet's PodReadyToStartContainers, its words for a pod not
    yet started, and Initialized's PodCompleted."""
    import condition_shapes

    from benchmarks.labs import examples

    built = condition_shapes.shapes(json.loads(recording_path("g4").read_text()))
    real = condition_shapes.shapes(json.loads(examples.recording_of("g4-real-node").read_text()))
    assert real <= built, sorted(real - built)
    assert {s[:4] for s in built - real} == {("Pod", "PodScheduled", "False", "Unschedulable"),
                                             ("Pod", "Ready", "False", "ContainersNotReady"),
                                             ("Pod", "ContainersReady", "False", "ContainersNotReady")}
