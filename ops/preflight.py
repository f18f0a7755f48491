"""Checks, before `pulumi up`, that the stack can come up, in this order: the Pulumi CLI, its login and
the stack; credentials; billing on the project; APIs; GPU quota in the region and in the whole project
(GPUS_ALL_REGIONS); L4 zones; and the kubeconfig's auth plugin. An expired login is reported as such,
never as "no quota" (an expired token is what makes a quota list come back empty).

    python -m ops.preflight --stack g6 [--project P] [--json]

Prints PASS/FAIL per check, one line each with its hint; exits 0 when every check passed, 1 when one
failed (an answer that cannot be read included), 2 when the stack file or the environment is wrong and
nothing was asked. --json prints one document instead (docs/schemas/preflight.schema.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from facts.gke_auth import ADC_FLAG, AUTH_PLUGIN, INSTALL_HINT
from ops.gcp import (
    LOGIN_HINT, TOKEN_HINT, ApiDisabled, CredentialsError, GcpClient, GcpError, MalformedAnswer, NetworkError,
    TokenRefused, host, validated,
)
from stacks.stackfile import OFFLINE_PROJECT, REPO, load_config
from stacks import cloud, kube_target, program
from stacks.config import LabConfig
from stacks.loader import ConfigError

ACCELERATOR = "nvidia-l4"
PLUGIN_TIMEOUT_S = 60  # the plugin retries a failing token source a few times before it gives up
PULUMI_TIMEOUT_S = 60
PULUMI_INSTALL = "install it (https://www.pulumi.com/docs/iac/download-install/)"
PROJECT_GPU_QUOTA = "GPUS_ALL_REGIONS"  # Compute's project-wide cap on GPUs, beside each region's
SCHEMA_VERSION = 1
NETWORK_HINT = (
    "nothing about the credentials or the project was checked: make sure this machine reaches "
    "*.googleapis.com (DNS, a proxy in HTTPS_PROXY, a firewall or VPN), then run preflight again"
)


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    ok: bool
    detail: str
    hint: str = ""

    def line(self) -> str:
        text = f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return text if self.ok or not self.hint else f"{text}; hint: {self.hint}"


class ServiceConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    name: str = ""


class Service(BaseModel):
    """An entry of Service Usage's services.list."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    name: str
    config: ServiceConfig = ServiceConfig()


class AcceleratorType(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    name: str


class Quota(BaseModel):
    """An entry of a region's or a project's `quotas` (Compute's Quota)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    metric: str
    limit: float
    usage: float = 0.0


class Quotas(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    quotas: list[Quota] = []


class BillingInfo(BaseModel):
    """Cloud Billing's ProjectBillingInfo; proto3 JSON leaves a false billingEnabled out."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    billingEnabled: bool = False  # noqa: N815 (Google's name)
    billingAccountName: str = ""  # noqa: N815


def required_apis(cfg: LabConfig) -> list[str]:
    """The APIs `pulumi up` enables for this stack (the same list stacks.cloud hands ProjectApis)."""
    return sorted(set(cloud.BASE_APIS + [api for group in program.FEATURE_GROUPS for api in group.apis(cfg)]))


def quota_metric(cfg: LabConfig) -> str:
    return "PREEMPTIBLE_NVIDIA_L4_GPUS" if cfg.gpu_spot else "NVIDIA_L4_GPUS"


def check_credentials(client: GcpClient, cfg: LabConfig) -> CheckResult:
    name = "credentials"
    try:
        client.token()
        # One cheap call that needs a valid token: a 401 here means the login is stale.
        project = client.get("cloudresourcemanager", f"projects/{cfg.project}")
    except CredentialsError as e:
        hint = TOKEN_HINT if isinstance(e, TokenRefused) else LOGIN_HINT
        return CheckResult(name=name, ok=False, detail=str(e), hint=hint)
    except NetworkError as e:
        return CheckResult(
            name=name, ok=False, detail=f"the network is the problem: {e}",
            hint=NETWORK_HINT,
        )
    except MalformedAnswer:
        raise  # an answer that cannot be read says nothing about the project: run_checks reports it as such
    except GcpError as e:
        return CheckResult(
            name=name, ok=False, detail=f"token works but project {cfg.project!r} is not usable: {e}",
            hint="check gcp:project in the stack file and that your account can see it",
        )
    state = project.get("lifecycleState", "ACTIVE")
    if state != "ACTIVE":
        return CheckResult(name=name, ok=False, detail=f"project {cfg.project} is {state}", hint="use an ACTIVE project")
    return CheckResult(name=name, ok=True, detail=f"token valid; project {cfg.project} is ACTIVE")


def check_apis(client: GcpClient, cfg: LabConfig) -> CheckResult:
    name = "APIs enabled"
    needed = required_apis(cfg)
    path = f"projects/{cfg.project}/services"
    enabled = set()
    for page in client.pages("serviceusage", path, filter="state:ENABLED", pageSize=200):
        services = validated(list[Service], page.get("services", []), f"{host('serviceusage')}: GET {path} services")
        enabled |= {s.config.name or s.name.rsplit("/", 1)[-1] for s in services}
    missing = [api for api in needed if api not in enabled]
    if missing:
        return CheckResult(
            name=name, ok=False, detail=f"not enabled: {', '.join(missing)}",
            hint=f"gcloud services enable {' '.join(missing)} --project {cfg.project}",
        )
    return CheckResult(name=name, ok=True, detail=f"all {len(needed)} enabled ({', '.join(needed)})")


def _quotas(client: GcpClient, path: str) -> list[Quota]:
    return validated(Quotas, client.get("compute", path), f"{host('compute')}: GET {path}").quotas


EMPTY_QUOTAS = "could not read quotas (auth or API problem): {} answered with no quota list"
EMPTY_HINT = f"{LOGIN_HINT}, then check that compute.googleapis.com is enabled; this is not a zero quota"


def _quota_check(client: GcpClient, cfg: LabConfig, *, name: str, path: str, scope: str, metric: str,
                 absent: CheckResult, more: str) -> CheckResult:  # fmt: skip
    """`metric` of the quota list at `path` (a region's or the project's) against the GPUs the pool may hold.
    Google always lists the quotas there: none at all means the answer is not to be trusted."""
    quotas = _quotas(client, path)
    if not quotas:
        return CheckResult(name=name, ok=False, detail=EMPTY_QUOTAS.format(scope), hint=EMPTY_HINT)
    quota = next((q for q in quotas if q.metric == metric), None)
    if quota is None:
        return absent
    free, need = quota.limit - quota.usage, cfg.max_gpus
    detail = f"limit {quota.limit:g}, in use {quota.usage:g}, free {free:g}; stack needs {need}"
    if free < need:
        return CheckResult(name=name, ok=False, detail=detail, hint=f"request more {metric} {more} or lower gpu_max_nodes")
    return CheckResult(name=name, ok=True, detail=detail)


def check_quota(client: GcpClient, cfg: LabConfig) -> CheckResult:
    metric = quota_metric(cfg)
    name = f"quota {metric} in {cfg.region}"
    absent = CheckResult(
        name=name, ok=False, detail=f"{metric} is not offered in {cfg.region} (quota list has no such metric)",
        hint="pick a region with L4 GPUs (gcloud compute accelerator-types list --filter=name=nvidia-l4)",
    )
    return _quota_check(client, cfg, name=name, path=f"projects/{cfg.project}/regions/{cfg.region}", scope="the region",
                        metric=metric, absent=absent, more=f"in {cfg.region} (IAM & Admin > Quotas)")  # fmt: skip


def check_project_gpu_quota(client: GcpClient, cfg: LabConfig) -> CheckResult:
    """GPUS_ALL_REGIONS caps every GPU of the project together; a new project's is often 0."""
    name = f"quota {PROJECT_GPU_QUOTA} of project {cfg.project}"
    absent = CheckResult(name=name, ok=False, detail=f"the project's quota list has no {PROJECT_GPU_QUOTA}",
                         hint="check the project's quotas in IAM & Admin > Quotas")  # fmt: skip
    return _quota_check(client, cfg, name=name, path=f"projects/{cfg.project}", scope="the project",
                        metric=PROJECT_GPU_QUOTA, absent=absent,
                        more="(a global quota) (IAM & Admin > Quotas, service Compute Engine API)")  # fmt: skip


def check_billing(client: GcpClient, cfg: LabConfig) -> CheckResult:
    """Cloud Billing's projects.getBillingInfo: billingEnabled is true only with an open billing account."""
    name = "billing"
    path = f"projects/{cfg.project}/billingInfo"
    info = validated(BillingInfo, client.get("cloudbilling", path), f"{host('cloudbilling')}: GET {path}")
    if not info.billingEnabled:
        account = f" ({info.billingAccountName} is closed)" if info.billingAccountName else " (no billing account)"
        return CheckResult(name=name, ok=False, detail=f"billing is not enabled on project {cfg.project}{account}: "
                           "nothing that costs money can be created", hint=f"gcloud billing projects link {cfg.project} "
                           "--billing-account=XXXXXX-XXXXXX-XXXXXX")  # fmt: skip
    return CheckResult(name=name, ok=True, detail=f"enabled ({info.billingAccountName})")


def check_zones(client: GcpClient, cfg: LabConfig) -> CheckResult:
    name = f"{ACCELERATOR} in zones"
    missing = []
    for zone in cfg.gpu_node_zones:
        path = f"projects/{cfg.project}/zones/{zone}/acceleratorTypes"
        page = client.get("compute", path, filter=f"name={ACCELERATOR}")
        items = validated(list[AcceleratorType], page.get("items", []), f"{host('compute')}: GET {path} items")
        if not any(item.name == ACCELERATOR for item in items):
            missing.append(zone)
    zones = ", ".join(cfg.gpu_node_zones)
    if missing:
        return CheckResult(
            name=name, ok=False, detail=f"{ACCELERATOR} not offered in {', '.join(missing)}",
            hint=f"set gpu_zones to zones listed by `gcloud compute accelerator-types list --filter=name={ACCELERATOR}`",
        )
    return CheckResult(name=name, ok=True, detail=f"offered in {zones}")


def check_auth_plugin(client: GcpClient, cfg: LabConfig) -> CheckResult:
    """The stack's kubeconfig runs the plugin for every Kubernetes call, with the ADC flag: run it so
    here, as kubectl and Pulumi will, and expect a token (it mints one from ADC; it writes nothing)."""
    name = AUTH_PLUGIN
    path = shutil.which(AUTH_PLUGIN)
    if path is None:
        return CheckResult(
            name=name, ok=False,
            detail=f"{AUTH_PLUGIN} is not on PATH; the stack's kubeconfig runs it for every Kubernetes object",
            hint=INSTALL_HINT,
        )
    try:
        done = subprocess.run([path, ADC_FLAG], capture_output=True, text=True, timeout=PLUGIN_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return CheckResult(name=name, ok=False, detail=f"{path} {ADC_FLAG} did not run: {e}", hint=INSTALL_HINT)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return CheckResult(
            name=name, ok=False, detail=f"{path} {ADC_FLAG} got no token from Application Default Credentials: {said}",
            hint=LOGIN_HINT,
        )
    try:
        status = json.loads(done.stdout)["status"]
        token, expiry = status["token"], status.get("expirationTimestamp")
    except (ValueError, KeyError, TypeError):
        token, expiry = None, None
    if not token:
        return CheckResult(
            name=name, ok=False, detail=f"{path} {ADC_FLAG} printed no ExecCredential with a token",
            hint=f"reinstall it: {INSTALL_HINT}",
        )
    until = f", valid until {expiry}" if expiry else ""
    return CheckResult(name=name, ok=True, detail=f"{path} gets a token from Application Default Credentials{until}")


def _pulumi(args: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(["pulumi", *args], capture_output=True, text=True, cwd=REPO, timeout=PULUMI_TIMEOUT_S,
                          check=False)  # fmt: skip
    return done.returncode, done.stdout, (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]


def check_pulumi(cfg: LabConfig) -> list[CheckResult]:
    """The Pulumi CLI, its login (the project's own backend, Pulumi.yaml's, or `pulumi login`) and the stack,
    in that order: each needs the one before it."""
    path = shutil.which("pulumi")
    if path is None:
        return [CheckResult(name="Pulumi CLI", ok=False, detail="the Pulumi CLI is not on PATH; `make up` runs it",
                            hint=PULUMI_INSTALL)]  # fmt: skip
    cli = CheckResult(name="Pulumi CLI", ok=True, detail=path)
    try:
        code, out, said = _pulumi(["whoami", "--json"])
        who = json.loads(out) if code == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        code, who, said = 1, None, f"`pulumi whoami --json` did not answer: {e}"
    if not isinstance(who, dict):
        return [cli, CheckResult(name="Pulumi login", ok=False, detail=f"not logged in to a Pulumi backend: {said}",
                                 hint="`pulumi login --local` (state in ~/.pulumi) or `pulumi login gs://YOUR_BUCKET`")]  # fmt: skip
    results = [cli, CheckResult(name="Pulumi login", ok=True, detail=f"{who.get('user', '?')} at {who.get('url', '?')}")]
    try:
        code, out, said = _pulumi(["stack", "ls", "--json"])
        names = [s["name"] for s in json.loads(out)] if code == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as e:
        names, said = None, f"`pulumi stack ls --json` printed no stack list: {e}"
    init = f"pulumi stack init {cfg.stack}"
    if names is None:
        results.append(CheckResult(name=f"stack {cfg.stack}", ok=False, detail=f"the stacks could not be listed: {said}",
                                   hint=f"check the login above; a new stack needs `{init}`"))  # fmt: skip
    elif not any(n == cfg.stack or n.endswith(f"/{cfg.stack}") for n in names):
        results.append(CheckResult(name=f"stack {cfg.stack}", ok=False, detail=f"no stack {cfg.stack} at "
                                   f"{who.get('url', '?')} (there: {', '.join(names) or 'none'})", hint=init))  # fmt: skip
    else:
        results.append(CheckResult(name=f"stack {cfg.stack}", ok=True, detail=f"exists at {who.get('url', '?')}"))
    return results


CHECKS: list[Callable[[GcpClient, LabConfig], CheckResult]] = [
    check_credentials, check_billing, check_apis, check_quota, check_project_gpu_quota, check_zones, check_auth_plugin,
]


def run_checks(client: GcpClient, cfg: LabConfig) -> list[CheckResult]:
    """Every check of Google, in order; after a credentials failure the rest are skipped (they would only
    repeat it in a misleading form)."""
    results = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_").replace("_", " ")  # where the check could not name itself
        try:
            result = check(client, cfg)
        except CredentialsError as e:
            result = CheckResult(name=name, ok=False, detail=str(e), hint=LOGIN_HINT)
        except ApiDisabled as e:
            result = CheckResult(
                name=name, ok=False, detail=str(e),
                hint="enable the API named in the message (gcloud services enable ...)",
            )
        except GcpError as e:
            result = CheckResult(name=name, ok=False, detail=str(e))
        results.append(result)
        if not result.ok and check is check_credentials:
            break
    return results


def as_json(stack: str, cfg: LabConfig | None, results: list[CheckResult], code: int, problem: str | None) -> str:
    """docs/schemas/preflight.schema.json"""
    return json.dumps({
        "schema_version": SCHEMA_VERSION, "stack": stack, "lab": cfg.lab if cfg else None,
        "project": cfg.project if cfg else None, "region": cfg.region if cfg else None,
        "passed": code == 0, "exit_status": code, "problem": problem,
        "checks": [r.model_dump() for r in results],
    }, indent=2)  # fmt: skip


def main(argv: list[str] | None = None, client: GcpClient | None = None, directory: Path = REPO) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.preflight", description="Checks before `pulumi up`.")
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument("--project", help="GCP project (default: gcp:project of the stack file)")
    parser.add_argument("--json", action="store_true", help="print one JSON document (docs/schemas/preflight.schema.json)")
    args = parser.parse_args(argv)

    def refuse(problem: str, cfg: LabConfig | None = None) -> int:
        print(as_json(args.stack, cfg, [], 2, problem) if args.json else f"FAIL  {problem}")
        return 2

    try:
        cfg = load_config(args.stack, project=args.project, directory=directory)
    except (ConfigError, FileNotFoundError) as e:
        return refuse(f"stack file: {e}")
    if cfg.cluster.existing:
        return existing_cluster(cfg, args.json)
    if not args.project and cfg.project == OFFLINE_PROJECT:
        return refuse(f"project: gcp:project is not set in Pulumi.{args.stack}.yaml; hint: pass --project or "
                      f"`pulumi config set gcp:project YOUR_PROJECT -s {args.stack}`")  # fmt: skip
    if not args.json:
        print(f"preflight for stack {args.stack} (lab {cfg.lab}) in project {cfg.project}, region {cfg.region}")
    try:
        gcp = client or GcpClient.from_environment()
    except GcpError as e:  # a misspelt endpoint override
        return refuse(f"environment: {e}", cfg)
    results = check_pulumi(cfg)
    with gcp:
        results += run_checks(gcp, cfg)
    failed = [r for r in results if not r.ok]
    code = 1 if failed else 0
    if args.json:
        print(as_json(args.stack, cfg, results, code, None))
        return code
    for result in results:
        print(result.line())
    print(f"all checks passed: `pulumi up -s {args.stack}` may go ahead" if not failed else f"{len(failed)} check(s) failed")
    return code


def existing_cluster(cfg: LabConfig, as_json_: bool = False) -> int:
    """An existing cluster: nothing of Google is created, so no Google check applies; its kubeconfig
    context must be there (no call is made to the cluster)."""
    c = cfg.cluster
    try:
        kube_target.context_kubeconfig(c, cfg.stack)
        code, result = 0, CheckResult(name="kubeconfig", ok=True, detail=f"context {c.context} in {c.kubeconfig}")
    except ConfigError as e:
        code, result = 2, CheckResult(name="kubeconfig", ok=False, detail="; ".join(e.problems))
    if as_json_:
        print(as_json(cfg.stack, cfg, [result], code, None))
        return code
    print(f"preflight for stack {cfg.stack} (lab {cfg.lab}) on the existing cluster of context {c.context}: "
          "no Google check applies, nothing of Google is created")  # fmt: skip
    print(f"OK    {result.name}: {result.detail}" if result.ok else result.line())
    return code


if __name__ == "__main__":
    sys.exit(main())
