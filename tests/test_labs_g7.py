"""g7: Workflow builder against the Argo CRD, the artefact check against a loopback server answering
like the Cloud Storage JSON API (reached through the endpoint override, a token in place of ADC), and
step outcomes from recorded status.nodes."""

from __future__ import annotations

import json

import pytest
import schemas
from fake_google import FakeGoogle, GoogleState
from labs_fakes import fixture_outputs, recording_path

from benchmarks.kube.record import Recording, load_recording
from benchmarks.labs import g7


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g7"))


METADATA = json.dumps({"workflow": "wf-1", "model": "iris-argo", "accuracy": 0.97})


def stored(name: str, content: str) -> dict:
    """An object as objects.list describes it (size a decimal string, as the JSON API writes it)."""
    return {"kind": "storage#object", "bucket": "lab-bucket", "name": name, "size": str(len(content.encode())),
            "contentType": "application/octet-stream", "generation": "1764600000000000", "content": content}


@pytest.fixture
def gcs():
    state = GoogleState(project="lab-project", buckets=[{"kind": "storage#bucket", "name": "lab-bucket"}], objects={
        "lab-bucket": [stored("models/iris-argo/wf-1/model.joblib", "x" * 1234),
                       stored("models/iris-argo/wf-1/metadata.json", METADATA),
                       stored("models/iris-argo/wf-2/model.joblib", "other run")]})  # fmt: skip
    with FakeGoogle(state) as google, google.client() as client:
        yield client


def test_workflow_references_the_template_and_validates():
    (wf,) = g7.build_workloads(fixture_outputs("g7"), "g7-0000-abcd", "deploy")
    schemas.validate_object(wf)
    assert wf["spec"]["workflowTemplateRef"] == {"name": "train-register-deploy"}
    assert wf["spec"]["arguments"]["parameters"] == [{"name": "fail_step", "value": "deploy"}]


def test_artefact_check_reads_objects_and_metadata_over_the_json_api(gcs):
    a = g7.check_artefact(gcs, "lab-bucket", "iris-argo", "wf-1")
    assert a.error is None
    assert a.objects == {"model.joblib": 1234, "metadata.json": len(METADATA)}
    assert a.metadata == json.loads(METADATA)


def test_artefact_check_reports_a_missing_bucket_as_a_finding(gcs):
    a = g7.check_artefact(gcs, "no-such-bucket", "iris-argo", "wf-1")
    assert a.objects == {} and a.error.startswith("NotFound: storage.googleapis.com: GET ") and "The specified bucket does not exist." in a.error


def test_recorded_objects_have_the_api_shapes(rec):
    for obj in [o for s in rec.snapshots for v in s.objects.values() for o in v] + rec.events:
        schemas.validate_object(obj)


def test_step_outcomes_show_failure_retries_and_omitted_steps(rec):
    result = g7.measure(rec)
    assert result.passed, result.checks
    failing = next(r for r in result.runs if r.fail_step == "register")
    steps = {s.step: s for s in failing.steps}
    assert steps["train"].phase == "Succeeded"
    assert steps["register"].phase == "Failed" and steps["register"].attempt_phases == ["Failed", "Failed"]
    assert steps["deploy"].phase == "Omitted" and failing.phase == "Failed"


def test_a_step_without_its_retries_fails_the_check(rec):
    raw = json.loads(rec.model_dump_json())
    wf = raw["snapshots"][-1]["objects"]["workflows"][0]
    retry = next(n for n in wf["status"]["nodes"].values() if n["displayName"] == "register")
    dropped = retry["children"].pop()
    del wf["status"]["nodes"][dropped]
    result = g7.measure(Recording.model_validate(raw))
    assert not result.checks[-1].passed and "after 1 attempt(s)" in result.checks[-1].evidence
