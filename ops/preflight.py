"""Checks, before `pulumi up`, that the stack can come up, in this order: credentials, APIs, GPU
quota, L4 zones, and the kubeconfig's auth plugin. An expired login is reported as such, never as
"no quota" (an expired token is what makes a quota list come back empty).

    python -m ops.preflight --stack g6 [--project P]

Prints PASS/FAIL per check with a hint; exits 1 on any failure (2 when the stack file is wrong).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from facts.gke_auth import ADC_FLAG, AUTH_PLUGIN, INSTALL_HINT
from ops.gcp import (
    LOGIN_HINT, TOKEN_HINT, ApiDisabled, CredentialsError, GcpClient, GcpError, NetworkError, TokenRefused,
)
from stacks.stackfile import OFFLINE_PROJECT, load_config
from stacks import cloud, kube_target, program
from stacks.config import LabConfig
from stacks.loader import ConfigError

ACCELERATOR = "nvidia-l4"
PLUGIN_TIMEOUT_S = 60  # the plugin retries a failing token source a few times before it gives up
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
        return text if self.ok or not self.hint else f"{text}\n      hint: {self.hint}"


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
    enabled = set()
    for page in client.pages("serviceusage", f"projects/{cfg.project}/services", filter="state:ENABLED", pageSize=200):
        enabled |= {s.get("config", {}).get("name") or s["name"].rsplit("/", 1)[-1] for s in page.get("services", [])}
    missing = [api for api in needed if api not in enabled]
    if missing:
        return CheckResult(
            name=name, ok=False, detail=f"not enabled: {', '.join(missing)}",
            hint=f"gcloud services enable {' '.join(missing)} --project {cfg.project}",
        )
    return CheckResult(name=name, ok=True, detail=f"all {len(needed)} enabled ({', '.join(needed)})")


def check_quota(client: GcpClient, cfg: LabConfig) -> CheckResult:
    metric = quota_metric(cfg)
    name = f"quota {metric} in {cfg.region}"
    region = client.get("compute", f"projects/{cfg.project}/regions/{cfg.region}")
    quotas = region.get("quotas") or []
    if not quotas:
        # Google always lists a region's quotas; none at all means the answer is not to be trusted.
        return CheckResult(
            name=name, ok=False, detail="could not read quotas (auth or API problem): the region answered with no quota list",
            hint=f"{LOGIN_HINT}, then check that compute.googleapis.com is enabled; this is not a zero quota",
        )
    quota = next((q for q in quotas if q.get("metric") == metric), None)
    need = cfg.max_gpus
    if quota is None:
        return CheckResult(
            name=name, ok=False, detail=f"{metric} is not offered in {cfg.region} (quota list has no such metric)",
            hint="pick a region with L4 GPUs (gcloud compute accelerator-types list --filter=name=nvidia-l4)",
        )
    free = float(quota.get("limit", 0)) - float(quota.get("usage", 0))
    detail = f"limit {quota.get('limit', 0):g}, in use {quota.get('usage', 0):g}, free {free:g}; stack needs {need}"
    if free < need:
        return CheckResult(
            name=name, ok=False, detail=detail,
            hint=f"request more {metric} in {cfg.region} (IAM & Admin > Quotas) or lower gpu_max_nodes",
        )
    return CheckResult(name=name, ok=True, detail=detail)


def check_zones(client: GcpClient, cfg: LabConfig) -> CheckResult:
    name = f"{ACCELERATOR} in zones"
    missing = []
    for zone in cfg.gpu_node_zones:
        page = client.get("compute", f"projects/{cfg.project}/zones/{zone}/acceleratorTypes", filter=f"name={ACCELERATOR}")
        if not any(item.get("name") == ACCELERATOR for item in page.get("items", [])):
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


CHECKS: list[Callable[[GcpClient, LabConfig], CheckResult]] = [
    check_credentials, check_apis, check_quota, check_zones, check_auth_plugin,
]


def run_checks(client: GcpClient, cfg: LabConfig) -> list[CheckResult]:
    """Every check, in order; after a credentials failure the rest are skipped (they would only
    repeat it in a misleading form)."""
    results = []
    for check in CHECKS:
        try:
            result = check(client, cfg)
        except CredentialsError as e:
            result = CheckResult(name=check.__name__.removeprefix("check_"), ok=False, detail=str(e), hint=LOGIN_HINT)
        except ApiDisabled as e:
            result = CheckResult(
                name=check.__name__.removeprefix("check_"), ok=False, detail=str(e),
                hint="enable the API named in the message (gcloud services enable ...)",
            )
        except GcpError as e:
            result = CheckResult(name=check.__name__.removeprefix("check_"), ok=False, detail=str(e))
        results.append(result)
        if not result.ok and check is check_credentials:
            break
    return results


def main(argv: list[str] | None = None, client: GcpClient | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.preflight", description="Checks before `pulumi up`.")
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument("--project", help="GCP project (default: gcp:project of the stack file)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.stack, project=args.project)
    except (ConfigError, FileNotFoundError) as e:
        print(f"FAIL  stack file: {e}")
        return 2
    if cfg.cluster.existing:
        return existing_cluster(cfg)
    if not args.project and cfg.project == OFFLINE_PROJECT:
        print(f"FAIL  project: gcp:project is not set in Pulumi.{args.stack}.yaml\n      hint: pass --project or "
              f"`pulumi config set gcp:project YOUR_PROJECT -s {args.stack}`")
        return 2
    print(f"preflight for stack {args.stack} (lab {cfg.lab}) in project {cfg.project}, region {cfg.region}")
    try:
        gcp = client or GcpClient.from_environment()
    except GcpError as e:  # a misspelt endpoint override
        print(f"FAIL  environment: {e}")
        return 2
    with gcp:
        results = run_checks(gcp, cfg)
    for result in results:
        print(result.line())
    failed = [r for r in results if not r.ok]
    print("all checks passed: `pulumi up -s %s` may go ahead" % args.stack if not failed else f"{len(failed)} check(s) failed")
    return 1 if failed else 0


def existing_cluster(cfg: LabConfig) -> int:
    """An existing cluster: nothing of Google is created, so no Google check applies; its kubeconfig
    context must be there (no call is made to the cluster)."""
    c = cfg.cluster
    print(f"preflight for stack {cfg.stack} (lab {cfg.lab}) on the existing cluster of context {c.context}: "
          "no Google check applies, nothing of Google is created")  # fmt: skip
    try:
        kube_target.context_kubeconfig(c, cfg.stack)
    except ConfigError as e:
        print(f"FAIL  kubeconfig: {'; '.join(e.problems)}")
        return 2
    print(f"OK    kubeconfig: context {c.context} in {c.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
