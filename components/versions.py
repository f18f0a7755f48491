"""Every chart, manifest URL and image tag the platform deploys, pinned here and nowhere else.

`upstream` names the folder (<component>/<version>) of tests/upstream.lock.tsv holding that version's
CRDs and chart defaults, so tests check our values and custom resources against exactly what we deploy;
`crds` the lock folders of the CRDs a chart installs, which stand in for it offline (components.upstream_crds;
empty where the lock holds none of them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    name: str
    repo: str  # an https Helm repository, or an oci:// registry path holding the chart
    version: str
    upstream: str | None = None
    crds: tuple[str, ...] = ()

    @property
    def is_oci(self) -> bool:
        return self.repo.startswith("oci://")


# Why the pins below stay where they are (reviewed 2026-12-03, issue 32). A pin may move only to a release
# whose files the tests can check the way they check this one: tests/upstream.lock.tsv names each file
# (repository, commit, path, sha256), a user's machine fetches it from raw.githubusercontent.com, and CI,
# which reaches no GitHub, reads it from UPSTREAM_DIR, a read-only copy that holds the currently pinned
# versions' files only. The project may not vendor upstream files, and the package registries CI reaches
# serve none of these charts, so a newer release's CRDs and chart defaults cannot be verified in CI: a
# pin moved now would be checked against nothing there. Each pin says below what its newest release is
# (as found in upstream repositories and trackers on that date) and what moving would change; moving
# one takes its files in UPSTREAM_DIR first.

# Images are pinned by tag, not by digest (checkov CKV_K8S_43), here and in benchmarks/kube/images.py:
# no registry can be reached from where this program is built and tested, so a digest written here
# could not be verified, and a wrong one would fail every pull. Pods pull IfNotPresent
# (podspec.security.IMAGE_PULL_POLICY), so a node keeps running the image it pulled first.

# --- Platform components of labs g1-g4 and g8 (brief D) ---
# Newest seen: kube-prometheus-stack-91.5.0 (2026-09-13; the issue reports 93). Its majors 89-91 came with
# new prometheus-operator CRD fields; the values we set (components.observability) would be checked again
# against 91's values.yaml and the ServiceMonitor/PrometheusRule CRDs, none of which UPSTREAM_DIR holds.
KUBE_PROMETHEUS_STACK = Chart(
    "kube-prometheus-stack",
    "https://prometheus-community.github.io/helm-charts",
    "88.5.3",
    upstream="kube-prometheus-stack/88.5.3",
    crds=("kube-prometheus-stack/88.5.3/crds/",),
)
# Chart 4.8.2 runs exporter image 4.5.3-4.8.2 (DCGM 4.5.3). Newer: 4.6.0-4.8.3 (2026-07-14, chart 4.8.3, DCGM
# 4.6.0; the GPU operator v26.7.0 pins it) and 4.8.4 (2026-09-18, DCGM 4.6.1). Their counter CSVs are not
# in UPSTREAM_DIR, so which fields they rename or drop cannot be listed from their files here; the test
# tests/test_dashboards.py (every DCGM_FI_ name we read against the exported list and these CSVs) is
# what a move must pass. Known from DCGM's notes: DCGM 4.7 removes the PCIe RX and TX throughput fields (ids 200, 201)
# (an exporter listing them exits at start); we list neither. No 4.9 release was found.
DCGM_EXPORTER = Chart(
    "dcgm-exporter", "https://nvidia.github.io/dcgm-exporter/helm-charts", "4.8.2", upstream="dcgm-exporter/4.5.3-4.8.2"
)
# v26.7.0 (2026-08-20) is the newest release found: current.
GPU_OPERATOR = Chart("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "v26.7.0", upstream="gpu-operator/v26.7.0")
# Newest seen: v0.19.4 (promoted 2026-09-10), a patch release of the same minor and API (v1beta2); its CRDs
# and values.yaml are not in UPSTREAM_DIR. No 0.20 release was found.
KUEUE = Chart("kueue", "oci://registry.k8s.io/kueue/charts", "0.19.2", upstream="kueue/v0.19.2", crds=("kueue/v0.19.2/crds/",))
# JobSet 0.12.0 and Kubeflow Trainer 2.3.0 (which depends on exactly that JobSet) were the newest tags of their
# upstream snapshots (2026-08); this review did not look for newer ones.
JOBSET = Chart("jobset", "oci://registry.k8s.io/jobset/charts", "0.12.0", upstream="jobset/v0.12.0", crds=("jobset/v0.12.0/crds/",))
# Kubeflow Trainer v2 (TrainJob, ClusterTrainingRuntime; the default `training_operator.api`): the chart
# installs the CRDs, the controller, JobSet 0.12.0 (its dependency, unless JobSet is installed already) and,
# through a post-install hook Job, the built-in runtimes we enable (torch-distributed).
KUBEFLOW_TRAINER = Chart(
    "kubeflow-trainer",
    "oci://ghcr.io/kubeflow/charts",
    "2.3.0",
    upstream="kubeflow-trainer/v2.3.0",
    crds=("kubeflow-trainer/v2.3.0/crds/",),
)
# Kubeflow Training Operator v1 (PyTorchJob, `training_operator.api: v1`): maintenance-only; the last v1
# release, installed with its own kustomize overlay.
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_KUSTOMIZE = (
    f"github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref={TRAINING_OPERATOR_VERSION}"
)
TRAINING_OPERATOR_CRDS = (f"training-operator/{TRAINING_OPERATOR_VERSION}/crds/",)
# Google's driver installer for COS GPU nodes whose pool has GKE's own install disabled (NVIDIA GPU
# Operator mode). Pinned to a commit of GoogleCloudPlatform/container-engine-accelerators (2026-06-11):
# the upstream docs point at `master`, which floats.
GKE_COS_DRIVER_INSTALLER_COMMIT = "992db81257553607f1477945f1b3219632991829"
GKE_COS_DRIVER_INSTALLER = {
    "DEFAULT": "nvidia-driver-installer/cos/daemonset-preloaded.yaml",
    "LATEST": "nvidia-driver-installer/cos/daemonset-preloaded-latest.yaml",
}
# The image the g4 job (TrainJob or PyTorchJob) and the g8 checkpointing job run (PyTorch with CUDA 12.4 for
# the L4; it replaces the torch-distributed runtime's own CUDA 13 image, which GKE's DEFAULT driver cannot run).
PYTORCH_IMAGE = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"

# --- Serving and pipelines of labs g5-g7 (brief E) ---
# KServe v0.20.0's own quick-install scripts (hack/setup/quick-install/kserve-knative-mode-*) were
# tested with Knative Serving 1.21.1 and cert-manager v1.17.0: we pin that Knative rather than the newest
# tag (knative-v1.23.0, 2026-07-29), so a first `pulumi up` runs what KServe tested; cert-manager below is
# newer (supported). That still holds: KServe's master of 2026-08-21 (kserve-deps.env, the quick-install
# scripts) still installs Knative 1.21.1, and v0.20.0 is KServe's newest release.
KSERVE_CRD = Chart(
    "kserve-crd",
    "oci://ghcr.io/kserve/charts",
    "v0.20.0",
    upstream="kserve/v0.20.0/charts/kserve-crd",
    crds=("kserve/v0.20.0/crds/",),
)
KSERVE_RESOURCES = Chart(
    "kserve-resources", "oci://ghcr.io/kserve/charts", "v0.20.0", upstream="kserve/v0.20.0/charts/kserve-resources"
)
# The ClusterServingRuntimes (sklearn, xgboost, ...) live in their own chart since v0.20.0.
KSERVE_RUNTIMES = Chart(
    "kserve-runtime-configs",
    "oci://ghcr.io/kserve/charts",
    "v0.20.0",
    upstream="kserve/v0.20.0/charts/kserve-runtime-configs",
)
# Triton for the g5 `runtime: triton` predictor: the tag kserve-runtime-configs v0.20.0 defaults to
# (values.yaml kserve.servingruntime.tritonserver), the one KServe tested; CUDA 12.1, so the L4 (Ada)
# and GKE's LATEST driver serve it. Several GB: the first pull on a new node takes minutes. KServe's master of
# 2026-08-21 still defaults to 23.05-py3. Newer NGC tags (25.xx) exist; moving off KServe's default means
# checking Triton's flags that KServe's ClusterServingRuntime passes and triton_start.sh against that
# release, and its CUDA against GKE's driver, with no file of that release the tests could read.
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:23.05-py3"
# cert-manager v1.21.1: v1.17.0 (the one KServe v0.20.0's scripts install) is out of support, which
# covers the last two minors only. KServe needs no more of it than the cert-manager.io/v1 Issuer
# (selfsigned-issuer) and Certificate (serving-cert) its kserve-resources chart creates for the webhook's
# serving certificate (v1 is served by every release since v1.0), and the CA injector, which writes that
# CA into the webhook configurations annotated cert-manager.io/inject-ca-from.
CERT_MANAGER = Chart("cert-manager", "https://charts.jetstack.io", "v1.21.1", upstream="cert-manager/v1.21.1")
KNATIVE_SERVING_VERSION = "knative-v1.21.1"
# serving-core.yaml includes the CRDs (serving-crds.yaml is a subset of it): components.knative applies only it.
KNATIVE_SERVING_CORE = (
    f"https://github.com/knative/serving/releases/download/{KNATIVE_SERVING_VERSION}/serving-core.yaml"
)
# net-kourier of the same minor as Serving (the networking layer must match Serving's minor).
KOURIER = (
    f"https://github.com/knative-extensions/net-kourier/releases/download/{KNATIVE_SERVING_VERSION}/kourier.yaml"
)
# vLLM v0.34.0, the newest release on PyPI (2026-12-07). Every server flag we pass, every /metrics name
# and label we read and the --quantization values we accept are checked against that release's wheel:
# tests/data/vllm/v0.34.0/ holds its `vllm serve --help=all` and a /metrics page of its own stat logger
# (what changed from v0.33.0, and what we checked of it: its README.md).
VLLM_VERSION = "v0.34.0"
# From v0.20 the untagged image is built on CUDA 13, which needs an NVIDIA driver of branch 580 or newer;
# the same release on CUDA 12.9 carries the suffix -cu129 (llm-d/llm-d-kv-cache#584 pins v0.20.2-cu129;
# ai-dynamo/nixl#2140, 2026-08: latest-cu129 is still published). No registry is reachable from here, so
# the -cu129 tag of this release is documented, not pulled. Keyed by vllm.cuda in the stack file.
VLLM_IMAGES = {
    "13": f"docker.io/vllm/vllm-openai:{VLLM_VERSION}",
    "12": f"docker.io/vllm/vllm-openai:{VLLM_VERSION}-cu129",
}
VLLM_IMAGE = VLLM_IMAGES["13"]
# The oldest NVIDIA driver branch each image's CUDA runs on: CUDA 13.0 needs 580.65 or newer
# (rapidsai/deployment#659: GKE's LATEST puts a driver above 580.65 on nodes, 2026-02); CUDA 12 runs on
# R525 and newer through CUDA's minor-version compatibility.
VLLM_CUDA_MIN_DRIVER_BRANCH = {"13": 580, "12": 525}
# KEDA for the vLLM server's autoscaling (the `autoscaling` feature): 2.20.2 is the newest release whose chart
# and CRDs UPSTREAM_DIR holds (2026-07-31); the module proxy serves v2.21.x too, with no chart or CRD files
# of it in any stored snapshot. The chart installs the CRDs, the operator, its metrics API server (the
# external metrics the HPA reads) and its admission webhooks.
KEDA = Chart("keda", "https://kedacore.github.io/charts", "2.20.2", upstream="keda/v2.20.2", crds=("keda/v2.20.2/crds/",))
# Newest seen: argo-workflows-2.0.4 (2026-08-11; 1.1.x added Argo Workflows v4.1 features, 2.0 is a major).
# Our values (components.argo: artifact repository, controller and server settings) would be checked again
# against 2.0's values.yaml and CRDs, which UPSTREAM_DIR does not hold.
ARGO_WORKFLOWS = Chart(
    "argo-workflows",
    "https://argoproj.github.io/argo-helm",
    "1.0.18",
    upstream="argo-workflows/1.0.18",
    crds=("argo-workflows/1.0.18/crds/",),
)
# The g7 train and register steps: a slim Python with pip (scikit-learn is installed at a pinned version).
PIPELINE_PYTHON_IMAGE = "docker.io/library/python:3.12.8-slim"
PIPELINE_SKLEARN = "scikit-learn==1.5.2"
PIPELINE_GCS = "google-cloud-storage==2.19.0"
# The one-time copy of a model's weights from Hugging Face into its bucket (vllm.weights: gcs).
WEIGHTS_HF_HUB = "huggingface_hub==0.36.0"

# --- Cost safety (brief F) ---
# The idle guard and the cost exporter are Python scripts mounted from ConfigMaps into this image
# (the same slim tag the g7 pipeline steps use, so nodes pull it once).
SCRIPTS_PYTHON_IMAGE = "docker.io/library/python:3.12.8-slim"
# The exporter's one dependency, installed at container start (same pin as requirements.txt).
SCRIPTS_PROMETHEUS_CLIENT = "prometheus-client==0.26.0"
PIPELINE_KUBERNETES = "kubernetes==31.0.0"
