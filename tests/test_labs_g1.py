"""g1: workload builders against the schemas, measurement on a recorded scale-from-zero run, live
path cleanup with a failing cluster."""

from __future__ import annotations

import copy
import json

import pytest
import schemas
from labs_fakes import FakeCluster, fixture_outputs, live_args, recording_path

from benchmarks.cluster import RUN_LABEL
from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, load_recording
from benchmarks.kube.timeline import parse_time
from benchmarks.labs import g1, live


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g1"))


def test_workloads_validate_and_only_the_probe_tolerates_the_gpu_taint():
    probe_found = False
    for obj in g1.build_workloads(fixture_outputs("g1"), "g1-0000-abcd"):
        schemas.validate_object(obj)
        spec = obj["spec"]
        limits = spec["containers"][0].get("resources", {}).get("limits", {})
        assert spec["nodeSelector"] == {"gke-ml-labs/pool": "gpu"}
        if "nvidia.com/gpu" in limits:
            probe_found = True
            assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
        else:
            assert "tolerations" not in spec
    assert probe_found


def test_recorded_objects_have_the_api_shapes(rec):
    for obj in rec.nodes + rec.events + [o for s in rec.snapshots for v in s.objects.values() for o in v]:
        schemas.validate_object(obj)


def test_timeline_follows_the_node_and_pod_timestamps(rec):
    result = g1.measure(rec)
    stages = {s.name: s for s in result.stages}
    # By hand from the fixture: probe pod created 17:02:00, TriggeredScaleUp 17:02:11, GPU node created
    # 17:03:05 and Ready 17:03:41, the probe bound to it 17:06:19 (its GPU allocatable), Ready 17:06:32.
    assert [(s.name, s.after_s) for s in result.stages] == [
        ("probe pod created", 0.0), ("scale-up triggered", 11.0), ("node created", 65.0), ("node Ready", 101.0),
        ("GPU allocatable", 259.0), ("probe scheduled", 259.0), ("probe running", 272.0),
    ]  # fmt: skip
    order = ["probe pod created", "scale-up triggered", "node created", "node Ready", "GPU allocatable", "probe running"]
    times = [stages[n].after_s for n in order]
    assert times == sorted(times) and None not in times
    # allocatable came after Ready (driver install), and no later than the probe was scheduled
    assert stages["node Ready"].after_s < stages["GPU allocatable"].after_s <= stages["probe scheduled"].after_s
    assert result.scaled_from_zero and result.gpu_allocatable == 1
    assert result.passed, result.checks
    assert result.versions.gpu_driver == "580.95.05"


def test_untolerated_pod_on_a_gpu_node_fails_the_check(rec):
    raw = json.loads(rec.model_dump_json())
    gpu_node = rec.nodes[-1]["metadata"]["name"]
    for snap in raw["snapshots"][-3:]:
        snap["objects"]["pods"][0]["spec"]["nodeName"] = gpu_node
    result = g1.measure(Recording.model_validate(raw))
    check = next(c for c in result.checks if "toleration" in c.name)
    assert not check.passed and gpu_node in check.evidence


@pytest.mark.parametrize("reason, passes", [
    # What kube-scheduler writes since it stopped naming the taint (seen from 1.34 clusters on).
    ("1 node(s) had untolerated taint(s)", True),
    ("1 node(s) had untolerated taint {dedicated: system}", False),  # some other taint: proves nothing
])
def test_the_schedulers_taint_message_with_or_without_the_taint_named(rec, reason, passes):
    raw = json.loads(rec.model_dump_json())
    for event in raw["events"]:
        if event["reason"] == "FailedScheduling" and "untolerated taint" in event["message"]:
            event["message"] = f"0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, {reason}."
    result = g1.measure(Recording.model_validate(raw))
    check = next(c for c in result.checks if "toleration" in c.name)
    assert check.passed is passes, check.evidence


def test_missing_dcgm_series_fails_the_check(rec):
    raw = json.loads(rec.model_dump_json())
    for answer in raw["client"]["dcgm"]:
        answer["data"]["result"] = []
    result = g1.measure(Recording.model_validate(raw))
    assert [c.passed for c in result.checks] == [True, True, False]


def test_wrong_stack_is_refused_before_anything_is_created(tmp_path):
    outputs = {**fixture_outputs("g1"), "lab": "g6"}
    cluster = FakeCluster()
    assert live.run(g1, live_args(tmp_path, dcgm_timeout=1.0), cluster=cluster, outputs=outputs) == 2
    assert cluster.created == [] and cluster.deleted == []
    with pytest.raises(LabError, match="lab 'g6'.*pulumi up -s g1"):
        g1.check_outputs(outputs)


def test_a_failure_mid_run_still_deletes_everything_labelled(tmp_path):
    def on_list(api_version, kind, namespace, selector):
        if kind == "Pod":
            raise LabError("API server went away")
        return []

    cluster = FakeCluster(on_list)
    assert live.run(g1, live_args(tmp_path, dcgm_timeout=1.0), cluster=cluster, outputs=fixture_outputs("g1")) == 2
    run_id = cluster.created[0]["metadata"]["labels"][RUN_LABEL]
    assert all(o["metadata"]["labels"][RUN_LABEL] == run_id for o in cluster.created)
    assert ("v1", "Pod", "default", f"{RUN_LABEL}={run_id}") in cluster.deleted


def test_ctrl_c_mid_wait_still_deletes_and_propagates(tmp_path):
    def on_list(api_version, kind, namespace, selector):
        if kind == "Pod":
            raise KeyboardInterrupt
        return []

    cluster = FakeCluster(on_list)
    with pytest.raises(KeyboardInterrupt):
        live.run(g1, live_args(tmp_path, dcgm_timeout=1.0), cluster=cluster, outputs=fixture_outputs("g1"))
    assert [d[1] for d in cluster.deleted] == ["Pod", "Pod"]  # the kind created, then the pod sweep


def test_timeout_while_waiting_is_reported_and_cleaned_up(tmp_path, capsys):
    pending = copy.deepcopy(load_recording(recording_path("g1")).snapshots[0].objects)

    def on_list(api_version, kind, namespace, selector):
        return pending["pods"] if kind == "Pod" else []

    cluster = FakeCluster(on_list)
    assert live.run(g1, live_args(tmp_path, dcgm_timeout=1.0), cluster=cluster, outputs=fixture_outputs("g1")) == 2
    assert "not done after" in capsys.readouterr().err
    assert cluster.deleted
    # what the run saw before it stopped is kept: the pending pods, and why it stopped
    (folder,) = list(tmp_path.iterdir())
    partial = load_recording(folder / "recording.json")
    assert partial.snapshots and partial.snapshots[-1].objects["pods"] == pending["pods"]
    assert partial.notes[-1].startswith("run stopped: GPU probe pod running")


def test_a_whole_live_run_against_a_scripted_cluster_writes_the_results_folder(tmp_path, rec):
    """The live path end to end: objects created, waits satisfied, recording measured, folder written,
    everything deleted. The cluster double answers like a cluster where the probe already runs."""
    node = rec.nodes[-1]

    def on_list(api_version, kind, namespace, selector):
        if kind == "Node":
            return [node]
        if kind == "Pod":
            pods = []
            for obj in cluster.created:
                pod = copy.deepcopy(obj)
                pod["metadata"]["creationTimestamp"] = "2026-11-29T17:02:00Z"
                if "tolerations" in pod["spec"]:
                    pod["spec"]["nodeName"] = node["metadata"]["name"]
                    pod["status"] = {"phase": "Running", "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T17:06:19Z"},
                        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T17:06:32Z"}]}
                else:
                    pod["status"] = {"phase": "Pending"}
                pods.append(pod)
            return pods
        if kind == "Event":
            untolerated = next(o for o in cluster.created if "tolerations" not in o["spec"])["metadata"]["name"]
            return [{"type": "Warning", "reason": "FailedScheduling", "involvedObject": {"kind": "Pod", "name": untolerated},
                     "message": "0/2 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}.",
                     "lastTimestamp": "2026-11-29T17:06:40Z"}]
        return []

    class DcgmCluster(FakeCluster):
        def service_get(self, namespace, service, port, path, params):
            assert (namespace, service, port, path) == ("monitoring", "kps-prometheus", 9090, "api/v1/query")
            result = [{"metric": {"Hostname": node["metadata"]["name"], "modelName": "NVIDIA L4"}, "value": [0, "1"]}]
            return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})

    cluster = DcgmCluster(on_list)
    # The probe's log is the nvidia-smi output the fixture recorded.
    cluster.on_log = lambda namespace, name, container: rec.nvidia_smi if name.startswith("g1-gpu-probe-") else ""
    assert live.run(g1, live_args(tmp_path, dcgm_timeout=1.0), cluster=cluster, outputs=fixture_outputs("g1")) == 0
    (folder,) = list(tmp_path.iterdir())
    assert {p.name for p in folder.iterdir()} >= {"recording.json", "result.json", "report.md"}
    assert "kubeconfig" not in (folder / "recording.json").read_text()
    run_id = cluster.created[0]["metadata"]["labels"][RUN_LABEL]
    assert ("v1", "Pod", "default", f"{RUN_LABEL}={run_id}") in cluster.deleted
    evidence = json.loads((folder / "result.json").read_text())["meta"]["evidence"]
    assert (evidence["driver_version"], evidence["cuda_version"]) == ("580.95.05", "13.0")
    assert "CUDA Version: 13.0" in (folder / "report.md").read_text()
    # The probe holds the node's one GPU, so no second nvidia-smi pod was created.
    assert [o["metadata"]["name"] for o in cluster.created if "nvidia-smi" in o["metadata"]["name"]] == []
