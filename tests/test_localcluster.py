"""The local cluster's pieces that need no binary: node shapes, kwok's Stages, the build modules.

The cluster itself (real processes) is tested by `make test-cluster` (tests/cluster/)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from localcluster import build, images, nodes, realnode
from stacks.stackfile import load_config


def _by_name(items: list[dict]) -> dict[str, dict]:
    return {i["metadata"]["name"]: i for i in items}


def test_a_node_has_the_allocatable_gke_reports_for_its_machine():
    # Hand arithmetic from GKE's reservation table (plan-node-sizes): 4 vCPUs keep 4000 - (60 + 10 + 2 x 5)
    # = 3920m, 2 vCPUs 2000 - (60 + 10) = 1930m, the figures `kubectl describe node` shows on GKE;
    # 16 GiB keep 16384 MiB - (25% x 4 + 20% x 4 + 10% x 8 GiB = 2662.4 MiB) - 100 MiB eviction = 13621.6 MiB.
    capacity, allocatable = nodes.resources("g2-standard-4", 100)
    assert capacity == {"cpu": "4", "memory": "16384Mi", "pods": "110", "ephemeral-storage": "100Gi"}
    assert allocatable["cpu"] == "3920m" and allocatable["memory"] == f"{int(13621.6 * 1024)}Ki"
    assert nodes.resources("e2-standard-2", 50)[1]["cpu"] == "1930m"
    # 32 GiB: 2662.4 MiB + 6% of the 16 GiB past the first 16 = 983.04 MiB more.
    assert nodes.resources("g2-standard-8", 100)[1]["memory"] == f"{int((32768 - 2662.4 - 983.04 - 100) * 1024)}Ki"


def test_the_g2_lab_gets_a_system_node_and_an_l4_node_shaped_like_its_pools():
    cfg = load_config("g2")  # time-slicing, 4 replicas per L4, on g2-standard-4 spot
    shaped = _by_name(nodes.lab_nodes(cfg, 10250))
    assert set(shaped) == {"system-0", "gpu-0"}
    gpu, system = shaped["gpu-0"], shaped["system-0"]
    assert gpu["metadata"]["labels"].items() >= {
        "cloud.google.com/gke-accelerator": "nvidia-l4",
        "cloud.google.com/gke-nodepool": "gpu",
        "cloud.google.com/gke-spot": "true",
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
        "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
        "gke-ml-labs/pool": "gpu",
        "node.kubernetes.io/instance-type": "g2-standard-4",
    }.items()
    assert gpu["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "4" == gpu["status"]["capacity"]["nvidia.com/gpu"]
    assert system["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == "system"
    assert system["metadata"]["labels"]["node.kubernetes.io/instance-type"] == cfg.system_machine_type
    assert "taints" not in system["spec"] and "nvidia.com/gpu" not in system["status"]["allocatable"]
    assert "cloud.google.com/gke-spot" not in system["metadata"]["labels"]  # the system pool is on-demand
    assert all(n["metadata"]["annotations"] == nodes.KWOK_ANNOTATION for n in shaped.values())


def test_without_sharing_an_l4_node_offers_its_physical_gpus():
    shaped = _by_name(nodes.lab_nodes(load_config("dev"), 10250))
    assert shaped["gpu-0"]["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert "cloud.google.com/gke-gpu-sharing-strategy" not in shaped["gpu-0"]["metadata"]["labels"]


def test_a_ready_node_still_carrying_the_admission_not_ready_taint_cannot_take_pods_yet():
    declared = nodes.lab_nodes(load_config("g1"), 10250)
    gpu = next(n for n in declared if n["metadata"]["name"] == "gpu-0")

    def listed(name: str, ready: str, admitted_taints: list[dict]) -> dict:
        # As GET /api/v1/nodes answers: the kube-apiserver's TaintNodesByCondition admission appends
        # {key: node.kubernetes.io/not-ready, effect: NoSchedule} to the taints a node is created with.
        return {"metadata": {"name": name}, "spec": {"taints": admitted_taints},
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]}}  # fmt: skip

    not_ready_taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    admitted = [*gpu["spec"]["taints"], not_ready_taint]
    system = listed("system-0", "True", [])
    assert nodes.not_schedulable(declared, [system]) == ["gpu-0 not registered"]
    assert nodes.not_schedulable(declared, [system, listed("gpu-0", "Unknown", admitted)]) == ["gpu-0 not Ready"]
    # kwok has set Ready; the node lifecycle controller has not lifted the admission's taint yet.
    still = nodes.not_schedulable(declared, [system, listed("gpu-0", "True", admitted)])
    assert still == ["gpu-0 still tainted node.kubernetes.io/not-ready"]
    # Lifted: only the pool's own taint stays, and it is the lab's, not a reason to wait.
    pool_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert nodes.not_schedulable(declared, [system, listed("gpu-0", "True", [pool_taint])]) == []


def test_kwok_config_manages_only_annotated_nodes_and_declares_the_pod_lifecycle():
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in nodes.kwok_flags("10.20.0.0/14")
    stages = _by_name(nodes.stages())
    assert set(stages) == {"node-ready", "pod-running", "job-pod-succeeded", "pod-gone"}
    job = stages["job-pod-succeeded"]["spec"]
    assert job["delay"]["durationFrom"]["expressionFrom"] == '.metadata.annotations["pod-complete.stage.kwok.x-k8s.io/delay"]'
    assert {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]} in job["selector"]["matchExpressions"]
    assert stages["pod-gone"]["spec"]["next"] == {"finalizers": {"empty": True}, "delete": True}
    # The templates are YAML once kwok's functions are filled in: a typo would fail every pod.
    for stage in stages.values():
        template = stage["spec"]["next"].get("statusTemplate")
        if template:
            assert "{{ end }}" in template and template.count("{{ range") == template.count("{{ end }}")
    yaml.safe_dump_all(nodes.stages())  # the file kwok reads


def test_a_jobs_pod_runs_as_long_as_the_cluster_is_told_and_the_cluster_says_so():
    job = _by_name(nodes.stages(20))["job-pod-succeeded"]["spec"]["delay"]
    assert job["durationMilliseconds"] == 20000
    said = nodes.simulated(nodes.lab_nodes(load_config("g2"), 10250), "v0.8.0", 20)
    # g2's pools: one e2-standard-4 system node, one g2-standard-4 L4 node time-sliced 4 ways.
    assert said["nodes"].startswith("2 nodes by kwok v0.8.0 (sigs.k8s.io/kwok), shaped like the lab's pools: ")
    assert "system-0 (e2-standard-4), gpu-0 (g2-standard-4, 4 nvidia.com/gpu)" in said["nodes"]
    assert "a Job's pod Succeeded 20 s later" in said["pods"] and "no pod writes a log" in said["pods"]


def test_each_build_module_names_its_binaries_and_stamps_the_pinned_versions():
    kube = build.MODULES["kube"]
    assert kube.binaries() == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubelet"]
    assert "-X k8s.io/component-base/version.gitVersion=v1.35.4" in kube.ldflags()
    assert "-X k8s.io/component-base/version.gitMinor=35" in kube.ldflags()
    assert build.MODULES["kwok"].binaries() == ["kwok"]
    # The real node's: stamped as their release builds stamp them; runc with seccomp (Restricted pods'
    # RuntimeDefault profile), containerd without btrfs (no headers; the node uses overlayfs).
    assert build.MODULES["containerd"].binaries() == ["containerd", "containerd-shim-runc-v2", "ctr"]
    assert "-X github.com/containerd/containerd/v2/version.Version=v2.4.2" in build.MODULES["containerd"].ldflags()
    assert "-tags=no_btrfs" in build.MODULES["containerd"].flags()
    assert build.MODULES["runc"].binaries() == ["runc"]
    assert "-X main.version=1.5.3" in build.MODULES["runc"].ldflags()
    assert "-tags=seccomp,urfave_cli_no_docs" in build.MODULES["runc"].flags()
    assert build.MODULES["cni"].binaries() == ["host-local", "bridge", "loopback", "portmap"]
    assert build.MODULES["coredns"].binaries() == ["coredns"]
    assert build.MODULES["pulumi"].binaries() == ["pulumi"]
    assert "version.Version=v3.274.0" in build.MODULES["pulumi"].ldflags()
    assert build.MODULES["pulumi-kubernetes"].binaries() == ["pulumi-resource-kubernetes"]
    # KEDA under the names of its own Makefile, stamped with the pinned tag, built only when named.
    assert build.MODULES["keda"].binaries() == ["keda-adapter", "keda"]
    assert "-X github.com/kedacore/keda/v2/version.Version=v2.20.2" in build.MODULES["keda"].ldflags()
    assert "keda" not in build.DEFAULT_MODULES and "kube" in build.DEFAULT_MODULES
    # Debug symbols go; Go's build info stays (it is not part of the symbol table).
    assert all(m.ldflags().startswith("-s -w") for m in build.MODULES.values())


def test_a_module_key_changes_with_its_pins_and_nothing_else(tmp_path, monkeypatch):
    copy = tmp_path / "gomod"
    shutil.copytree(build.GOMOD / "kwok", copy / "kwok")
    monkeypatch.setattr(build, "GOMOD", copy)
    module = build.MODULES["kwok"]
    before = module.key("go1.26.8")
    assert module.key("go1.26.8") == before and module.key("go1.27.3") != before
    go_sum = copy / "kwok" / "go.sum"
    go_sum.write_text(go_sum.read_text() + "example.com/x v1.0.0 h1:abc=\n")
    assert module.key("go1.26.8") != before


def test_an_existing_build_is_reused_without_compiling(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CACHE", tmp_path)
    go_version = build._go(["env", "GOVERSION"], build.REPO).strip()
    module = build.MODULES["kwok"]
    folder = tmp_path / f"kwok-{module.key(go_version)}"
    folder.mkdir()
    (folder / "kwok").write_text("")
    said: list[str] = []
    monkeypatch.setattr(build, "_compile", lambda *a: pytest.fail("compiled a module whose binaries exist"))
    built = build.ensure(["kwok"], say=said.append)
    assert built.binary("kwok") == folder / "kwok"
    assert said == ["reused kwok from .cache/bin/ (nothing to build)"]


def test_a_module_that_does_not_compile_fails_in_one_line_naming_it(tmp_path, monkeypatch):
    module_dir = tmp_path / "gomod" / "broken"
    (module_dir / "cmd" / "broken").mkdir(parents=True)
    (module_dir / "go.mod").write_text("module example.com/broken\n\ngo 1.24\n\ntool example.com/broken/cmd/broken\n")
    (module_dir / "go.sum").write_text("")
    (module_dir / "cmd" / "broken" / "main.go").write_text("package main\n\nfunc main() { println(missing) }\n")
    monkeypatch.setattr(build, "GOMOD", tmp_path / "gomod")
    monkeypatch.setattr(build, "CACHE", tmp_path / "bin")
    monkeypatch.setitem(build.MODULES, "broken", build.Module("broken"))
    with pytest.raises(build.BuildError) as failed:
        build.ensure(["broken"], say=lambda line: None)
    message = str(failed.value)
    assert "\n" not in message and message.startswith("module localcluster/gomod/broken did not build:")
    assert "cmd/broken/main.go:3:23: undefined: missing" in message and "logs/broken.log" in message
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["logs"]  # no half-built folder to reuse


def test_an_unknown_module_is_one_clear_line():
    with pytest.raises(build.BuildError, match="unknown build module.*kube, kwok, pulumi, pulumi-kubernetes"):
        build.ensure(["kubelet"])


def test_what_the_api_server_dials_for_a_node_stays_on_loopback():
    """A pod's log is read by the API server from the node's kubelet endpoint: kwok's server on
    127.0.0.1, never a private address or a host name (this machine may reach loopback only)."""
    for node in nodes.lab_nodes(load_config("g3"), 41234):
        assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
        assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 41234}}


def test_a_lab_on_the_local_cluster_is_its_own_stack_file_turned_to_existing(tmp_path):
    from localcluster import bench
    from stacks.cluster_config import GKE_ONLY_KEYS

    config = bench.stack_file("g3", tmp_path / "kubeconfig")["config"]
    assert config["gke-ml-labs:cluster"] == {"target": "existing", "kubeconfig": str(tmp_path / "kubeconfig"),
                                             "context": "gke-ml-labs-local", "charts": "upstream-crds"}  # fmt: skip
    # Pulumi.g3.yaml's own keys stay (its quota of two whole jobs), its GKE-only ones go (zone, gpu_spot).
    assert config["gke-ml-labs:kueue"]["quota_gpus"] == 6 and config["gke-ml-labs:lab"] == "g3"
    assert not {f"gke-ml-labs:{k}" for k in GKE_ONLY_KEYS} & set(config)
    assert not [k for k in config if not k.startswith("gke-ml-labs:")]  # no gcp:project: nothing of Google


def test_a_local_run_sets_config_keys_as_pulumi_config_set_does(tmp_path):
    from localcluster import bench

    changes = bench.settings(["gpu_max_nodes=2", "autoscaling.enabled=true", "vllm.cpu=0.5"])
    assert changes == {"gpu_max_nodes": 2, "autoscaling": {"enabled": True}, "vllm": {"cpu": 0.5}}
    config = bench.stack_file("g6", tmp_path / "kubeconfig", changes)["config"]
    # A field set over the stack file's object keeps its other fields (--path), a key is replaced.
    assert config["gke-ml-labs:vllm"]["cpu"] == 0.5 and config["gke-ml-labs:vllm"]["max_num_seqs"] == 256
    assert config["gke-ml-labs:gpu_max_nodes"] == 2 and config["gke-ml-labs:autoscaling"] == {"enabled": True}
    with pytest.raises(bench.BenchError, match="expected KEY=VALUE"):
        bench.settings(["gpu_max_nodes"])


def test_a_whole_gpu_pool_on_the_real_node_leaves_kwok_no_gpu_node():
    cfg = load_config("g6", overrides={"gpu_max_nodes": 2})
    gpu = [n for n in nodes.lab_nodes(cfg, 10250) if nodes.in_gpu_pool(n)]
    assert [n["metadata"]["name"] for n in gpu] == ["gpu-0", "gpu-1"]
    assert not [n for n in nodes.lab_nodes(cfg, 10250) if nodes.in_gpu_pool(n) and n["metadata"]["name"].startswith("system")]


def test_prometheus_scrapes_what_the_vllm_service_monitor_selects_with_the_operators_labels(tmp_path):
    """The scrape job made of the stack's own vLLM ServiceMonitor, and the targets its discovery finds: the
    ready addresses of the selected Service's port, labelled as the operator labels them (namespace, service:
    what KEDA's query filters on); Prometheus' own promtool accepts the configuration and the targets."""
    import json
    import subprocess

    from components import vllm
    from localcluster import prometheus
    from stacks.compose_serving import vllm_args

    monitor = vllm.service_monitor(vllm_args(load_config("g6"), nodes.PLACEMENT.gpu))
    (job,) = prometheus.scrape_config(monitor, tmp_path)
    assert job["job_name"] == "serviceMonitor/llm/vllm/0" and job["scrape_interval"] == "15s"
    assert job["metrics_path"] == "/metrics"
    selected = {"metadata": {"namespace": "llm", "name": "vllm", "labels": {"app.kubernetes.io/name": "vllm"}}}
    other = {"metadata": {"namespace": "llm", "name": "other", "labels": {"app.kubernetes.io/name": "other"}}}
    endpoints = [
        {"metadata": {"namespace": "llm", "name": "vllm"}, "subsets": [{
            "addresses": [{"ip": "10.64.255.4", "targetRef": {"kind": "Pod", "name": "vllm-7c9d-abcde"}}],
            "notReadyAddresses": [{"ip": "10.64.255.5", "targetRef": {"kind": "Pod", "name": "vllm-7c9d-fghij"}}],
            "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}]}]},
        {"metadata": {"namespace": "llm", "name": "other"}, "subsets": [{
            "addresses": [{"ip": "10.64.255.9"}], "ports": [{"name": "http", "port": 8000}]}]},
    ]  # fmt: skip
    found = prometheus.discovered(monitor, [selected, other], endpoints)
    assert found == {"serviceMonitor_llm_vllm_0": [{"targets": ["10.64.255.4:8000"], "labels": {
        "namespace": "llm", "service": "vllm", "job": "vllm", "endpoint": "http", "pod": "vllm-7c9d-abcde"}}]}  # fmt: skip
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian's prometheus package) is not installed")
    (tmp_path / "serviceMonitor_llm_vllm_0.json").write_text(json.dumps(found["serviceMonitor_llm_vllm_0"]))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [job]}))
    done = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_keda_s_pair_serves_its_services_and_the_node_and_is_a_client_too(tmp_path):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from localcluster import certs

    pki = certs.generate(tmp_path)
    certs.issue_pair(pki, "keda", ["keda-operator-metrics-apiserver.keda.svc"], ["127.0.0.1", "10.128.0.2"])
    cert = x509.load_pem_x509_certificate(pki.cert("keda").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["keda-operator-metrics-apiserver.keda.svc"]
    assert [str(i) for i in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.128.0.2"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert cert.issuer == x509.load_pem_x509_certificate(pki.ca.read_bytes()).subject


def test_every_image_the_labs_pods_name_has_a_stand_in_or_a_reason_it_has_none():
    from benchmarks.kube import images as lab_images
    from components import versions

    named = {*lab_images.ALL, versions.PYTORCH_IMAGE, versions.TRITON_IMAGE, *versions.VLLM_IMAGES.values(),
             versions.SCRIPTS_PYTHON_IMAGE, versions.PIPELINE_PYTHON_IMAGE}  # fmt: skip
    missing = {images.normalise(i) for i in named} - set(images.STAND_INS) - set(images.NO_STAND_IN)
    assert missing == set()
    assert set(images.STAND_INS) & set(images.NO_STAND_IN) == set()


@pytest.mark.parametrize("lab, trains", [("g4", True), ("g8", True), ("g1", False), ("g3", False), ("g6", False)])
def test_only_a_lab_whose_pods_train_imports_the_pytorch_stand_in(lab, trains):
    """A 485 MiB archive, built and imported on demand: for g4's ranks and g8's trainer, which name its
    image (benchmarks.kube.images.PYTORCH_CUDA); every other stand-in goes to every real node."""
    from benchmarks.kube import images as lab_images

    pytorch = images.normalise(lab_images.PYTORCH_CUDA)
    wanted = images.for_lab(load_config(lab))
    assert (pytorch in wanted) == trains
    assert set(wanted) - {pytorch} == set(images.STAND_INS) - {pytorch}
    assert pytorch not in images.ALWAYS and images.STAND_INS[pytorch].on_demand


@pytest.mark.parametrize("reference, normalised", [
    ("python:3.12.8-slim", "docker.io/library/python:3.12.8-slim"),
    ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),
    ("docker.io/vllm/vllm-openai:v0.34.0", "docker.io/vllm/vllm-openai:v0.34.0"),
    ("nvcr.io/nvidia/tritonserver:23.05-py3", "nvcr.io/nvidia/tritonserver:23.05-py3"),
    ("localhost:5000/mine:1", "localhost:5000/mine:1"),
    ("registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.2"),
])  # fmt: skip
def test_a_short_image_name_is_normalised_as_containerd_resolves_it(reference, normalised):
    assert images.normalise(reference) == normalised


def test_a_stand_in_archive_carries_its_label_and_the_reference_ctr_imports_it_under(tmp_path, monkeypatch):
    import tarfile

    monkeypatch.setattr(images, "CACHE", tmp_path)
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 5
        tar.addfile(info, __import__("io").BytesIO(b"node\n"))
    image = images.STAND_INS[images.BUSYBOX]
    archive = tmp_path / "busybox.oci.tar"
    images._oci_archive(image, rootfs, archive)
    assert images.manifest_labels(archive) == {images.STAND_IN_LABEL: image.stands_in_for}
    with tarfile.open(archive) as tar:
        index = yaml.safe_load(tar.extractfile("index.json"))
        assert index["manifests"][0]["annotations"][images.REFERENCE_ANNOTATION] == "docker.io/library/busybox:1.37.0"
        assert "oci-layout" in tar.getnames()


def test_the_vllm_stand_in_starts_from_the_project_files_its_image_carries(tmp_path):
    """The image carries only some of the project (StandIn.files): its `vllm serve` must start from those alone
    (a module of the kit that imported one left out once crashed the pod at start, seen only on the real node).
    Here the same files under a folder of their own and this Python's packages for the image's pinned ones:
    the stand-in's command, given a flag it does not model, gets as far as refusing it in its one line."""
    import subprocess
    import sys

    from components.versions import VLLM_IMAGE

    image = images.STAND_INS[images.normalise(VLLM_IMAGE)]
    root = tmp_path / "image"
    for target, source in image.files.items():
        if target.startswith(images.PROJECT_IN_IMAGE + "/"):
            place = root / target.removeprefix(images.PROJECT_IN_IMAGE + "/")
            place.parent.mkdir(parents=True, exist_ok=True)
            place.symlink_to(source)
    done = subprocess.run([sys.executable, "-m", "benchmarks.sim.vllm_serve", "serve", "--no-such-flag"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert (done.returncode, done.stderr) == (2, "error: vllm stand-in: --no-such-flag: a vLLM flag the simulated "
                                                  "backend does not model\n"), done.stderr[-2000:]


def test_a_stand_in_is_rebuilt_when_its_recipe_changes_and_only_then():
    import dataclasses

    image = images.STAND_INS[images.BUSYBOX]
    assert image.key() == dataclasses.replace(image).key()
    assert image.key() != dataclasses.replace(image, debs=(*image.debs, "curl")).key()
    assert image.archive.name.startswith("docker.io_library_busybox_1.37.0-")


def test_the_real_node_takes_its_addresses_from_the_lab_s_own_ranges():
    cfg = load_config("g6")
    a = realnode.Addresses.of(cfg.subnet_cidr, cfg.pods_cidr, cfg.services_cidr)
    # 10.10.0.0/20: its first two host addresses; 10.20.0.0/14 ends at 10.23.255.255: its last /24.
    assert (a.host, a.node, a.prefix, a.pods, a.services) == ("10.10.0.1", "10.10.0.2", 20, "10.23.255.0/24", "10.24.0.0/20")


def test_keda_s_metrics_api_is_registered_on_a_service_the_lab_s_destroy_cannot_remove():
    """The APIService names a Service in the local cluster's own namespace (the lab's destroy deletes the chart's
    `keda` namespace while KEDA still runs; an APIService without its Service stalls every namespace
    deletion), whose one endpoint is the metrics server at the node's address on its secure port."""
    from localcluster import keda

    objects = {body["kind"]: body for _, body in keda._objects("10.10.0.2", b"CA")}
    ref = objects["APIService"]["spec"]["service"]
    assert objects["APIService"]["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert (ref["namespace"], ref["name"]) == (objects["Service"]["metadata"]["namespace"], objects["Service"]["metadata"]["name"])
    assert ref["namespace"] != "keda" and objects["Namespace"]["metadata"]["name"] == ref["namespace"]
    (port,) = objects["Service"]["spec"]["ports"]
    (subset,) = objects["Endpoints"]["subsets"]
    assert port["port"] == ref["port"] and port["targetPort"] == subset["ports"][0]["port"] == keda.SECURE_PORT
    assert subset["ports"][0]["name"] == port["name"] and subset["addresses"] == [{"ip": "10.10.0.2"}]


def test_a_real_node_folder_too_deep_for_the_kubelet_s_sockets_is_refused_before_anything_starts(tmp_path):
    """A Unix socket path holds at most 107 bytes: under a long pytest folder the kubelet died with "bind:
    invalid argument" after the node's namespaces were up. Now one line, and nothing made."""
    deep = tmp_path / ("x" * 80)
    node = realnode.RealNode(deep, None, "https://127.0.0.1:6443", None, {}, None, {})  # type: ignore[arg-type]
    with pytest.raises(realnode.NodeError, match=r"too deep for the kubelet's Unix sockets \(\d+ bytes of at most 107\)"):
        node.start()
    assert not deep.exists()


def test_g8_on_the_real_node_checkpoints_to_the_emulated_bucket_and_selects_its_spot_gpu_node(tmp_path):
    """g8 refuses a GPU pool not known to be Spot and needs a bucket: locally the stack file says both, as a user
    with Spot GPU nodes of their own writes them, and the selector still finds the real node."""
    from localcluster import bench
    from stacks.loader import parse

    cfg = load_config("g8")
    bucket, changes = bench._preempted_with_bucket("g8", cfg, {})
    config = bench.stack_file("g8", tmp_path / "kubeconfig", changes)["config"]
    cluster = config["gke-ml-labs:cluster"]
    assert bucket == cluster["bucket"] == "local-checkpoints" and cluster["target"] == "existing"
    selector = cluster["gpu_nodes"]["node_selector"]
    assert selector["cloud.google.com/gke-spot"] == "true"
    (real,) = [n for n in nodes.lab_nodes(cfg, 10250) if n["metadata"]["name"] == nodes.REAL_NODE_NAME]
    assert selector.items() <= real["metadata"]["labels"].items()
    parse({k.removeprefix("gke-ml-labs:"): v for k, v in config.items()}, stack="g8", project="p", region="us-central1")
    # A bucket the user named stays theirs; a lab that neither preempts nor checkpoints is left as it is.
    assert bench._preempted_with_bucket("g8", cfg, {"cluster": {"bucket": "mine"}})[0] == "mine"
    assert bench._preempted_with_bucket("g4", load_config("g4"), {"vllm": {}}) == (None, {"vllm": {}})
