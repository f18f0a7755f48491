"""g7: Workflow builder against the Argo CRD, the artefact check against a real S3-protocol server
(moto on loopback, as GCS's XML API speaks S3), and step outcomes from recorded status.nodes."""

from __future__ import annotations

import json

import boto3
import pytest
import schemas
from labs_fakes import fixture_outputs, recording_path
from moto.server import ThreadedMotoServer

from benchmarks.labs import g7
from benchmarks.labs.record import Recording, load_recording


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g7"))


@pytest.fixture(scope="module")
def s3():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", aws_access_key_id="GOOG1EXAMPLE",
                          aws_secret_access_key="secret", region_name="us-east-1")
    yield client
    server.stop()


def test_workflow_references_the_template_and_validates():
    (wf,) = g7.build_workloads(fixture_outputs("g7"), "g7-0000-abcd", "deploy")
    schemas.validate_object(wf)
    assert wf["spec"]["workflowTemplateRef"] == {"name": "train-register-deploy"}
    assert wf["spec"]["arguments"]["parameters"] == [{"name": "fail_step", "value": "deploy"}]


def test_artefact_check_reads_objects_and_metadata_over_s3(s3):
    s3.create_bucket(Bucket="lab-bucket")
    prefix = "models/iris-argo/wf-1/"
    s3.put_object(Bucket="lab-bucket", Key=prefix + "model.joblib", Body=b"x" * 1234)
    s3.put_object(Bucket="lab-bucket", Key=prefix + "metadata.json", Body=json.dumps({"workflow": "wf-1"}).encode())
    s3.put_object(Bucket="lab-bucket", Key="models/iris-argo/wf-2/model.joblib", Body=b"other run")
    a = g7.check_artefact(s3, "lab-bucket", "iris-argo", "wf-1")
    assert a.error is None
    assert a.objects == {"model.joblib": 1234, "metadata.json": len(json.dumps({"workflow": "wf-1"}))}
    assert a.metadata == {"workflow": "wf-1"}


def test_artefact_check_reports_a_missing_bucket_as_a_finding(s3):
    a = g7.check_artefact(s3, "no-such-bucket", "iris-argo", "wf-1")
    assert a.objects == {} and "NoSuchBucket" in a.error


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


def test_missing_hmac_credentials_say_how_to_get_them(monkeypatch):
    monkeypatch.delenv("GCS_HMAC_ACCESS_ID", raising=False)
    with pytest.raises(g7.LabError, match="gcloud storage hmac create"):
        g7.s3_client(g7.GCS_XML_ENDPOINT)
