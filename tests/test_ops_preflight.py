"""Preflight against a local server that answers like Google: the order of the checks, an expired
token reported as such (never as "no quota"), an empty quota list not read as zero quota, a broken
answer one FAIL line naming its API, billing and the project-wide GPU quota; the Pulumi CLI, its login
and the stack (a stand-in `pulumi` answering as v3.276's whoami and stack ls do); and the kubeconfig's
auth plugin, missing, failing and working (a stand-in on PATH that answers as the real plugin does, and
the real plugin where it is installed)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import jsonschema
import pytest

from fake_google import EXPIRED_TOKEN, VALID_TOKEN, FakeGoogle, Fault, GoogleState
from ops import preflight
from ops.gcp import CredentialsError, GcpClient, adc_token
from stacks.stackfile import load_config

PROJECT = "lab-project"
REAL_PLUGIN = shutil.which("gke-gcloud-auth-plugin")
# What the real plugin (v1.30) prints with the ADC flag: an ExecCredential.
EXEC_CREDENTIAL = {
    "kind": "ExecCredential",
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "spec": {"interactive": False},
    "status": {"expirationTimestamp": "2026-12-01T13:40:21Z", "token": "ya29.plugin"},
}
# What it prints on stderr (exit status 1) with the ADC flag where no ADC exists, recorded from it.
NO_ADC = (
    "F1201 12:40:06.165921   13035 cred.go:145] print credential failed with error: Failed to retrieve access "
    "token:: getting google default token failed after multiple retries: cannot construct google default token "
    "source: google: could not find default credentials. See "
    "https://cloud.google.com/docs/authentication/external/set-up-adc for more information"
)


def plugin(folder: Path, monkeypatch, stdout: str = "", stderr: str = "", status: int = 0) -> Path:
    """A stand-in gke-gcloud-auth-plugin alone on PATH. It answers only when asked for Application
    Default Credentials: without the flag the real one would use gcloud's active account instead."""
    folder.mkdir(exist_ok=True)
    script = folder / "gke-gcloud-auth-plugin"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "--use_application_default_credentials" ] || { echo "asked for gcloud\'s account" >&2; exit 1; }\n'
        # Shell built-ins only: PATH holds nothing else.
        f"printf '%s\\n' '{stdout}'\nprintf '%s\\n' '{stderr}' >&2\nexit {status}\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    return script


@pytest.fixture(autouse=True)
def working_plugin(tmp_path, monkeypatch):
    return plugin(tmp_path / "bin", monkeypatch, stdout=json.dumps(EXEC_CREDENTIAL))


# What pulumi v3.276 prints: `whoami --json` (cmd/pulumi/whoami, whoAmIJSON), `stack ls --json`
# (cmd/pulumi/stack/stack_list.go, stackSummaryJSON), and whoami without a login in a script.
WHOAMI = json.dumps({"user": "lab-user", "url": "file://~"})
STACKS = json.dumps([{"name": "dev", "current": True, "lastUpdate": "2026-11-29T16:02:11.000Z", "resourceCount": 0}])
NO_LOGIN = "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions"


def pulumi_cli(folder: Path, whoami: tuple[str, int] = (WHOAMI, 0), stacks: str = STACKS) -> None:
    """A stand-in `pulumi` beside the plugin (PATH holds that folder only: shell built-ins)."""
    script = folder / "pulumi"
    out, status = whoami
    stream = ">&2" if status else ""
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = whoami ]; then printf \'%s\\n\' \'{out}\' {stream}; exit {status}; fi\n'
        f'if [ "$1 $2" = "stack ls" ]; then printf \'%s\\n\' \'{stacks}\'; exit 0; fi\n'
        'echo "unexpected: $*" >&2; exit 1\n'
    )
    script.chmod(0o755)


def quotas(spot_limit: float, spot_usage: float = 0.0) -> list[dict]:
    # regions.get lists every regional quota; a few real ones around the GPU metrics.
    return [
        {"metric": "CPUS", "limit": 24.0, "usage": 4.0},
        {"metric": "NVIDIA_L4_GPUS", "limit": 1.0, "usage": 0.0},
        {"metric": "PREEMPTIBLE_NVIDIA_L4_GPUS", "limit": spot_limit, "usage": spot_usage},
        {"metric": "SSD_TOTAL_GB", "limit": 500.0, "usage": 0.0},
    ]


@pytest.fixture
def cfg():
    return load_config("dev", project=PROJECT)


# A project's quotas (projects.get) list GPUS_ALL_REGIONS among the global ones.
PROJECT_QUOTAS = [{"metric": "SNAPSHOTS", "limit": 5000.0, "usage": 0.0},
                  {"metric": "GPUS_ALL_REGIONS", "limit": 1.0, "usage": 0.0},
                  {"metric": "NETWORKS", "limit": 15.0, "usage": 1.0}]  # fmt: skip
BILLING = {"billingAccountName": "billingAccounts/012345-6789AB-CDEF01", "billingEnabled": True}


def healthy(cfg) -> GoogleState:
    return GoogleState(
        project=PROJECT,
        enabled_services=preflight.required_apis(cfg) + ["logging.googleapis.com"],
        region_quotas={cfg.region: quotas(spot_limit=4.0)},
        zone_accelerators={z: ["nvidia-tesla-t4", "nvidia-l4"] for z in cfg.gpu_node_zones},
        project_quotas=PROJECT_QUOTAS, billing=BILLING,
    )


def run(state: GoogleState, cfg, token: str = "ya29.valid-token") -> list[preflight.CheckResult]:
    with FakeGoogle(state) as google, google.client(token) as client:
        return preflight.run_checks(client, cfg)


def test_all_checks_pass_in_order(cfg, working_plugin):
    results = run(healthy(cfg), cfg)
    assert [r.ok for r in results] == [True] * 7, [r.line() for r in results]
    assert [r.name for r in results] == [
        "credentials", "billing", "APIs enabled", "quota PREEMPTIBLE_NVIDIA_L4_GPUS in us-central1",
        f"quota GPUS_ALL_REGIONS of project {PROJECT}", "nvidia-l4 in zones", "gke-gcloud-auth-plugin",
    ]
    assert results[1].detail == "enabled (billingAccounts/012345-6789AB-CDEF01)"
    assert "free 4" in results[3].detail and "needs 1" in results[3].detail
    assert results[4].detail == "limit 1, in use 0, free 1; stack needs 1"
    assert results[6].detail == (
        f"{working_plugin} gets a token from Application Default Credentials, valid until 2026-12-01T13:40:21Z"
    )


def test_auth_plugin_missing_from_path(cfg, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = preflight.check_auth_plugin(GcpClient(token_source=lambda: "x"), cfg)
    assert not result.ok
    assert result.detail == (
        "gke-gcloud-auth-plugin is not on PATH; the stack's kubeconfig runs it for every Kubernetes object"
    )
    assert result.hint == "gcloud components install gke-gcloud-auth-plugin"


def test_auth_plugin_without_adc_says_why_and_how_to_log_in(cfg, tmp_path, monkeypatch):
    plugin(tmp_path / "bin", monkeypatch, stderr=NO_ADC, status=1)
    result = preflight.check_auth_plugin(GcpClient(token_source=lambda: "x"), cfg)
    assert not result.ok and result.detail.endswith("google: could not find default credentials. See "
                                                   "https://cloud.google.com/docs/authentication/external/set-up-adc "
                                                   "for more information")
    assert "got no token from Application Default Credentials" in result.detail
    assert result.hint == "run `gcloud auth application-default login`"


def test_auth_plugin_printing_no_credential_fails(cfg, tmp_path, monkeypatch):
    plugin(tmp_path / "bin", monkeypatch, stdout=json.dumps({**EXEC_CREDENTIAL, "status": {}}))
    result = preflight.check_auth_plugin(GcpClient(token_source=lambda: "x"), cfg)
    assert not result.ok and "printed no ExecCredential with a token" in result.detail


@pytest.mark.skipif(REAL_PLUGIN is None, reason="gke-gcloud-auth-plugin is not installed")
def test_the_real_plugin_gets_its_token_from_adc(cfg, tmp_path, monkeypatch):
    # ADC here is a VM's: the metadata server (on loopback, GCE_METADATA_HOST) hands out the token. No
    # gcloud login and no ADC file exist (HOME and CLOUDSDK_CONFIG are empty), so only with the ADC flag
    # can the plugin return that token.
    monkeypatch.setenv("PATH", str(Path(REAL_PLUGIN).parent))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    state = GoogleState(project=PROJECT)
    with FakeGoogle(state) as google:
        monkeypatch.setenv("GCE_METADATA_HOST", google.url.removeprefix("http://"))
        result = preflight.check_auth_plugin(google.client(), cfg)
    assert result.ok, result.line()
    assert result.detail.startswith(f"{REAL_PLUGIN} gets a token from Application Default Credentials, valid until")
    token_calls = [q for _, path, q, _ in state.calls if path.endswith("/service-accounts/default/token")]
    assert token_calls and "cloud-platform" in token_calls[0]["scopes"]
    assert VALID_TOKEN not in result.line(), "the token itself is never printed"


def test_expired_token_is_reported_as_credentials_not_quota(cfg):
    state = healthy(cfg)
    results = run(state, cfg, token=EXPIRED_TOKEN)
    assert len(results) == 1, "checks after a credentials failure would only repeat it"
    (result,) = results
    assert not result.ok and result.name == "credentials"
    assert "credentials expired/invalid: run `gcloud auth application-default login`" in result.detail
    assert "quota" not in result.line().lower()
    # It stopped at the cheap call: no quota was asked for.
    assert not any("/regions/" in path for _, path, _, _ in state.calls)


def test_failed_token_refresh_is_reported_as_credentials(cfg):
    def refresh_fails() -> str:
        raise CredentialsError("token refresh failed: invalid_grant")

    with FakeGoogle(healthy(cfg)) as google:
        client = GcpClient(token_source=refresh_fails, base_urls={"cloudresourcemanager": f"{google.url}/crm/v1"})
        (result,) = preflight.run_checks(client, cfg)
    assert not result.ok and "credentials expired/invalid" in result.detail and "invalid_grant" in result.detail


def test_missing_adc_says_not_found_and_how_to_create_it(monkeypatch, tmp_path, cfg, capsys):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-file.json"))
    with pytest.raises(CredentialsError, match=r"^credentials not found: .*`gcloud auth application-default login`"):
        adc_token()
    assert preflight.main(["--stack", "dev", "--project", PROJECT], client=GcpClient()) == 1
    out = capsys.readouterr().out
    assert "FAIL  credentials: credentials not found" in out and "expired" not in out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_adc_without_a_network_says_the_network_is_the_problem(monkeypatch, tmp_path, capsys):
    """A real ADC file (what `gcloud auth application-default login` writes) and a network that reaches
    nothing: here a proxy on a closed loopback port, so no request leaves the machine."""
    adc = tmp_path / "application_default_credentials.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "764086051850-x.apps.googleusercontent.com",
                               "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty", "refresh_token": "1//0g-refresh"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    proxy = f"http://127.0.0.1:{_closed_port()}"
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert preflight.main(["--stack", "dev", "--project", PROJECT], client=GcpClient()) == 1
    out = capsys.readouterr().out
    assert "FAIL  credentials: the network is the problem: could not reach Google to refresh the token" in out
    assert "hint: nothing about the credentials or the project was checked" in out and "HTTPS_PROXY" in out
    assert "gcp:project" not in out and "expired" not in out


def test_a_token_but_no_route_to_the_api_says_the_network_is_the_problem(cfg):
    client = GcpClient(token_source=lambda: "ya29.valid-token",
                       base_urls={"cloudresourcemanager": f"http://127.0.0.1:{_closed_port()}/crm/v1"})
    (result,) = preflight.run_checks(client, cfg)
    assert not result.ok and result.detail.startswith("the network is the problem: cloudresourcemanager.googleapis.com: GET http://127.0.0.1:")
    assert "could not reach Google (ConnectError" in result.detail and result.hint == preflight.NETWORK_HINT


def test_empty_quota_list_is_not_zero_quota(cfg):
    state = healthy(cfg)
    state.region_quotas = {cfg.region: []}
    results = run(state, cfg)
    quota = results[3]
    assert not quota.ok
    assert "could not read quotas (auth or API problem)" in quota.detail
    assert "not a zero quota" in quota.hint


def test_quota_below_what_the_pool_needs(cfg):
    state = healthy(cfg)
    state.region_quotas = {cfg.region: quotas(spot_limit=1.0, spot_usage=1.0)}
    quota = run(state, cfg)[3]
    assert not quota.ok and "free 0" in quota.detail and "needs 1" in quota.detail
    assert "PREEMPTIBLE_NVIDIA_L4_GPUS" in quota.hint


def test_on_demand_pool_checks_the_on_demand_metric():
    on_demand = load_config("dev", project=PROJECT).model_copy(update={"gpu_spot": False})
    state = healthy(on_demand)
    state.region_quotas = {on_demand.region: quotas(spot_limit=8.0)}  # NVIDIA_L4_GPUS limit 1, usage 0
    quota = run(state, on_demand)[3]
    assert quota.ok and quota.name.startswith("quota NVIDIA_L4_GPUS")


def test_missing_api_and_zone_without_l4_fail_with_hints(cfg):
    state = healthy(cfg)
    state.enabled_services = [s for s in state.enabled_services if s != "container.googleapis.com"]
    state.zone_accelerators = {z: ["nvidia-tesla-t4"] for z in cfg.gpu_node_zones}
    results = run(state, cfg)
    apis, zones = results[2], results[5]
    assert not apis.ok and "container.googleapis.com" in apis.detail
    assert apis.hint == f"gcloud services enable container.googleapis.com --project {PROJECT}"
    assert not zones.ok and cfg.gpu_node_zones[0] in zones.detail and "gpu_zones" in zones.hint


def test_required_apis_follow_the_features(cfg):
    with_budget = cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"billing_account": "012345-6789AB-CDEF01"})})
    assert "billingbudgets.googleapis.com" not in preflight.required_apis(cfg)
    assert "billingbudgets.googleapis.com" in preflight.required_apis(with_budget)


def test_main_exit_codes_and_output(cfg, capsys, working_plugin):
    pulumi_cli(working_plugin.parent)
    with FakeGoogle(healthy(cfg)) as google:
        assert preflight.main(["--stack", "dev", "--project", PROJECT], client=google.client()) == 0
        out = capsys.readouterr().out
        assert "PASS  Pulumi login: lab-user at file://~" in out and "PASS  stack dev: exists at file://~" in out
        assert out.rstrip().endswith("all checks passed: `pulumi up -s dev` may go ahead")
        assert preflight.main(["--stack", "dev", "--project", PROJECT], client=google.client(EXPIRED_TOKEN)) == 1
        out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "credentials" in line]
    assert line.startswith("FAIL  credentials: credentials expired/invalid") and "; hint: run `gcloud auth" in line


@pytest.mark.parametrize("case", ["no CLI", "no login", "no stack"])
def test_the_pulumi_cli_its_login_and_the_stack_are_checked_before_pulumi_up(cfg, capsys, working_plugin, case):
    if case != "no CLI":
        pulumi_cli(working_plugin.parent, whoami=(NO_LOGIN, 255) if case == "no login" else (WHOAMI, 0),
                   stacks=json.dumps([{"name": "g6", "current": False}]))  # fmt: skip
    with FakeGoogle(healthy(cfg)) as google:
        assert preflight.main(["--stack", "dev", "--project", PROJECT], client=google.client()) == 1
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert line == {
        "no CLI": "FAIL  Pulumi CLI: the Pulumi CLI is not on PATH; `make up` runs it; hint: install it "
                  "(https://www.pulumi.com/docs/iac/download-install/)",
        "no login": f"FAIL  Pulumi login: not logged in to a Pulumi backend: {NO_LOGIN}; hint: `pulumi login --local` "
                    "(state in ~/.pulumi) or `pulumi login gs://YOUR_BUCKET`",
        "no stack": "FAIL  stack dev: no stack dev at file://~ (there: g6); hint: pulumi stack init dev",
    }[case]  # fmt: skip
    assert "may go ahead" not in out


def test_billing_disabled_and_no_project_wide_gpu_quota_fail_one_line_each(cfg, working_plugin):
    state = healthy(cfg)
    state.billing = {"billingAccountName": "billingAccounts/012345-6789AB-CDEF01"}  # closed: billingEnabled left out
    state.project_quotas = [{"metric": "GPUS_ALL_REGIONS", "limit": 0.0, "usage": 0.0}]  # a new project's
    results = {r.name: r for r in run(state, cfg)}
    billing, gpus = results["billing"], results[f"quota GPUS_ALL_REGIONS of project {PROJECT}"]
    assert billing.line() == (f"FAIL  billing: billing is not enabled on project {PROJECT} (billingAccounts/012345-"
                              "6789AB-CDEF01 is closed): nothing that costs money can be created; hint: gcloud billing "
                              f"projects link {PROJECT} --billing-account=XXXXXX-XXXXXX-XXXXXX")  # fmt: skip
    assert gpus.line() == (f"FAIL  quota GPUS_ALL_REGIONS of project {PROJECT}: limit 0, in use 0, free 0; stack needs 1; "
                           "hint: request more GPUS_ALL_REGIONS (a global quota) (IAM & Admin > Quotas, service Compute "
                           "Engine API) or lower gpu_max_nodes")  # fmt: skip
    state.billing = None  # no billing account at all
    assert "(no billing account)" in {r.name: r for r in run(state, cfg)}["billing"].detail


@pytest.mark.parametrize("mode", ["cut-off JSON", "wrong shape", "empty body", "JSON array", "503"])
@pytest.mark.parametrize("where", ["/regions/us-central1", "/compute/v1/projects/lab-project", "/billingInfo",
                                   "/services", "/acceleratorTypes"])
def test_a_broken_answer_is_one_fail_line_naming_its_api(cfg, where, mode):
    state = healthy(cfg)
    # The project's own quotas are at its bare path, which every other Compute path starts with.
    state.faults = [Fault(where, mode, exact=where.endswith(PROJECT))]
    with FakeGoogle(state) as google, google.client(sleep=lambda s: None) as client:
        results = preflight.run_checks(client, cfg)
    failed = [r for r in results if not r.ok]
    assert failed, "a broken answer is never a pass"
    api = {"/billingInfo": "cloudbilling", "/services": "serviceusage"}.get(where, "compute")
    assert any(f"{api}.googleapis.com: GET" in r.detail for r in failed), [r.line() for r in failed]
    assert all("\n" not in r.line() for r in results)


def test_json_follows_the_documented_schema(cfg, capsys, working_plugin):
    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "schemas" / "preflight.schema.json").read_text())
    pulumi_cli(working_plugin.parent)
    with FakeGoogle(healthy(cfg)) as google:
        assert preflight.main(["--stack", "dev", "--project", PROJECT, "--json"], client=google.client()) == 0
        passed = json.loads(capsys.readouterr().out)
        assert preflight.main(["--stack", "dev", "--project", PROJECT, "--json"], client=google.client(EXPIRED_TOKEN)) == 1
        failed = json.loads(capsys.readouterr().out)
    assert preflight.main(["--stack", "nope", "--json"], client=GcpClient(token_source=lambda: "x")) == 2
    refused = json.loads(capsys.readouterr().out)
    for document in (passed, failed, refused):
        jsonschema.validate(document, schema)
    assert passed["passed"] and len(passed["checks"]) == 10 and not failed["passed"]
    assert refused["exit_status"] == 2 and refused["problem"].startswith("stack file: no stack file Pulumi.nope.yaml")


def test_unknown_stack_fails_clearly(capsys):
    assert preflight.main(["--stack", "nope", "--project", PROJECT], client=GcpClient(token_source=lambda: "x")) == 2
    assert "no stack file Pulumi.nope.yaml" in capsys.readouterr().out


def test_a_malformed_credentials_file_says_so_not_not_found(tmp_path, monkeypatch):
    key = tmp_path / "key.json"
    key.write_text('{"type": "service_account", "project_id": "lab-project",')  # cut short, as a bad copy is
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    with pytest.raises(CredentialsError) as e:
        adc_token()
    message = str(e.value)
    assert message.startswith(f"credentials file invalid: GOOGLE_APPLICATION_CREDENTIALS={key} exists but is not a "
                              "usable credentials file (not JSON: ")
    assert "not found" not in message and "\n" not in message


def test_a_misspelt_endpoint_override_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("GKE_ML_LABS_ENDPOINT_COMPUTER", "http://127.0.0.1:1/compute/v1")
    assert preflight.main(["--stack", "dev", "--project", PROJECT]) == 2
    (line,) = capsys.readouterr().out.splitlines()[-1:]
    assert line.startswith("FAIL  environment: GKE_ML_LABS_ENDPOINT_COMPUTER: no such API endpoint to override; "
                           "known: GKE_ML_LABS_ENDPOINT_SERVICEUSAGE, GKE_ML_LABS_ENDPOINT_COMPUTE,")


def test_a_refused_token_from_the_environment_names_that_variable(cfg, monkeypatch):
    with FakeGoogle(healthy(cfg)) as google:
        for name, value in google.environment(EXPIRED_TOKEN).items():
            monkeypatch.setenv(name, value)
        with GcpClient.from_environment() as client:
            (result,) = preflight.run_checks(client, cfg)
    assert result.detail.startswith("credentials expired/invalid: Google refused the access token in "
                                    "GOOGLE_OAUTH_ACCESS_TOKEN: set a fresh GOOGLE_OAUTH_ACCESS_TOKEN")
    assert result.hint.startswith("set a fresh GOOGLE_OAUTH_ACCESS_TOKEN") and "application-default" not in result.hint
