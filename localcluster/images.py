"""Stand-in images for the real node, built here from Debian's packages and PyPI: no Docker, no registry.

Each stand-in is a root filesystem made by mmdebstrap (Debian's own chroot builder, through apt and the
machine's Debian sources), with the pip packages it needs installed into it, written as an OCI image
archive whose config carries a label saying what it stands in for. The node's containerd imports it
under the exact reference the lab's manifests name, so the manifests run unchanged.

An archive is kept in `.cache/images/` under a key digesting everything that decides it (the suite, the
packages, the pip pins, the files copied in, this module's recipe version): a second build does nothing.

    python -m localcluster.images            # build every stand-in (minutes, once)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from components.versions import PYTORCH_IMAGE, SCRIPTS_PYTHON_IMAGE, TRITON_IMAGE, VLLM_IMAGES
from localcluster.build import REPO
from stacks.config import LabConfig

CACHE = REPO / ".cache" / "images"
SUITE = "bookworm"  # Debian 12: its python3 is 3.11, the project's own Python
# The machine's Debian sources (deb822), pasted into the chroot by mmdebstrap: no mirror is named here.
SOURCES = Path(os.environ.get("STANDIN_DEBIAN_SOURCES", "/etc/apt/sources.list.d/debian.sources"))
RECIPE = "1"  # bump when the way an archive is made changes, so every cached one is rebuilt
STAND_IN_LABEL = "io.gke-ml-labs.stand-in-for"
PAUSE = "registry.k8s.io/pause:3.10.2"
# benchmarks.kube.images.BUSYBOX, which localcluster may not import (tests/import_rules.py): a test holds
# every image the labs' pods name to a stand-in here or to a reason there is none (NO_STAND_IN).
BUSYBOX = "docker.io/library/busybox:1.37.0"
PROJECT_IN_IMAGE = "/opt/gke-ml-labs"  # where the vLLM stand-in carries the project's simulator
REFERENCE_ANNOTATION = "io.containerd.image.name"  # the name `ctr images import` gives the image

TORCHRUN_STD = '"$1/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py"'

Say = Callable[[str], None]


class ImageError(Exception):
    """A stand-in image could not be built: one line naming the image and what failed."""


@dataclass(frozen=True)
class StandIn:
    """One stand-in: the reference it takes, what it stands in for, and what goes into it."""

    reference: str  # as the manifests name it (a short Docker name is normalised, as containerd does)
    stands_in_for: str
    debs: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    files: dict[str, Path] = field(default_factory=dict)  # path in the image -> a file or folder of ours
    on_demand: bool = False  # built and imported only when a lab's pods name it (for_lab)
    hooks: tuple[str, ...] = ()  # shell run on the finished root filesystem ("$1"), each said why where it is set

    @property
    def name(self) -> str:
        return normalise(self.reference)

    def key(self) -> str:
        digest = hashlib.sha256()
        for part in (RECIPE, SUITE, self.name, self.stands_in_for, *self.debs, "|", *self.pip, "|", *self.cmd, *self.env, "|", *self.hooks):
            digest.update(part.encode() + b"\0")
        for target, source in sorted(self.files.items()):
            digest.update(target.encode() + b"\0")
            for path in sorted(source.rglob("*")) if source.is_dir() else [source]:
                if path.is_file() and "__pycache__" not in path.parts:
                    digest.update(path.relative_to(source.parent).as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:12]

    @property
    def archive(self) -> Path:
        safe = self.name.replace("/", "_").replace(":", "_")
        return CACHE / f"{safe}-{self.key()}.oci.tar"


def normalise(reference: str) -> str:
    """A Docker short name as containerd's CRI resolves it: python:3.12 -> docker.io/library/python:3.12."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{reference}"
    return reference


def pins(*names: str) -> tuple[str, ...]:
    """These packages as requirements.txt pins them (the project's one list of versions)."""
    lines = [ln.split("#")[0].strip() for ln in (REPO / "requirements.txt").read_text().splitlines()]
    found = {ln.split("==")[0].lower(): ln for ln in lines if "==" in ln}
    return tuple(found[n.lower()] for n in names)


STAND_INS: dict[str, StandIn] = {
    s.name: s
    for s in (
        StandIn(
            SCRIPTS_PYTHON_IMAGE,  # the benchmarks' pods name the same tag (benchmarks.kube.images.PYTHON)
            "the official Python image: here Debian 12's python3 (3.11), not 3.12; the scripts it runs use the "
            "standard library only",
            debs=("python3", "python-is-python3", "ca-certificates"),
            cmd=("python3",),
        ),
        StandIn(
            VLLM_IMAGES["13"],
            "vLLM's OpenAI-compatible server: here the project's simulated backend (benchmarks.sim) behind the same "
            "`vllm serve` command line, API and /metrics, its L4 and engine simulated; a flag it does not model is "
            "refused",
            debs=("python3",),
            pip=pins("httpx", "numpy", "prometheus-client", "pydantic", "rich", "starlette", "uvicorn"),
            env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"PYTHONPATH={PROJECT_IN_IMAGE}"),
            files={
                "/usr/local/bin/vllm": REPO / "localcluster" / "standins" / "vllm",
                # What the simulator imports (tests/test_localcluster.py starts it from these alone): the
                # kit, its facts, and the stack-outputs contract its harness reads (stacks/outputs.py).
                f"{PROJECT_IN_IMAGE}/benchmarks": REPO / "benchmarks",
                f"{PROJECT_IN_IMAGE}/facts": REPO / "facts",
                f"{PROJECT_IN_IMAGE}/stacks/__init__.py": REPO / "stacks" / "__init__.py",
                f"{PROJECT_IN_IMAGE}/stacks/outputs.py": REPO / "stacks" / "outputs.py",
            },
            cmd=("vllm", "serve"),
        ),
        # Debian's own CPU build of PyTorch (1.13.1, with gloo): PyPI serves only the CUDA wheel, whose ~3 GB of
        # CUDA libraries it cannot import without. A 485 MiB archive, so built and imported only for a lab that runs it.
        StandIn(
            PYTORCH_IMAGE,  # the g4 and g8 pods name the same tag (benchmarks.kube.images.PYTORCH_CUDA)
            "the official PyTorch image (2.5.1, CUDA 12.4): here Debian 12's CPU build of PyTorch 1.13.1 with gloo, "
            "its torchrun and python3; no CUDA, so torch.cuda.is_available() is False",
            debs=("python3-torch", "python-is-python3", "ca-certificates"),
            cmd=("python3",),
            on_demand=True,
            # torch 1.13 under Python 3.11 (Debian's pairing): torchrun's Std.from_str finds its value by
            # iterating the IntFlag, which 3.11 no longer does for 0 (NONE) or 3 (ALL), so every torchrun dies
            # with "'NoneType' object has no attribute 'get'". torch 2.0 looks the member up by value instead;
            # so does this.
            hooks=(f"sed -i 's/for s in Std:/for s in Std.__members__.values():/' {TORCHRUN_STD} && "
                   f"grep -q 'for s in Std.__members__.values():' {TORCHRUN_STD}",),
        ),
        # Every pod's sandbox (containerd's pinned `sandbox` image, its default in containerd 2.4): it only
        # holds the pod's namespaces open.
        StandIn(
            PAUSE,
            "Kubernetes' pause container: here Debian 12's busybox-static sleeping",
            debs=("busybox-static",),
            cmd=("/bin/busybox", "sleep", "2147483647"),
        ),
        StandIn(
            BUSYBOX,
            "the official BusyBox image: here Debian 12's busybox-static, its applets linked into /bin",
            debs=("busybox-static",),
            cmd=("sh",),
        ),
    )
}


ALWAYS = tuple(name for name, s in STAND_INS.items() if not s.on_demand)  # what every real node imports

# The images the labs' pods name that have no stand-in yet, and why: a pod of them on the real node waits in
# ErrImageNeverPull-like failure (nothing can be pulled), so its lab says so.
NO_STAND_IN: dict[str, str] = {
    normalise(VLLM_IMAGES["12"]): "the CUDA 12 build of vLLM: its stand-in would be the CUDA 13 one's, which g6 runs by default",
    normalise(TRITON_IMAGE): "Triton's server cannot be stood in for by anything built here (g5)",
}


def for_lab(lab: LabConfig) -> tuple[str, ...]:
    """The stand-ins a lab's real node imports: every one but those built on demand, and PyTorch's for a lab
    whose pods train (g4's job, g8's checkpointed trainer)."""
    trains = lab.training_operator.enabled or lab.checkpoints.enabled
    return ALWAYS + ((normalise(PYTORCH_IMAGE),) if trains else ())


def _run(command: list[str], what: str, image: StandIn) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [f"exit {done.returncode}"]
        # mmdebstrap ends with a generic line; the one before it names the hook or step that failed.
        last = next((ln for ln in reversed(lines) if "failed to run" not in ln), lines[-1])
        raise ImageError(f"stand-in {image.name}: {what} failed: {last}")


def _rootfs(image: StandIn, tar_path: Path) -> None:
    """The image's root filesystem as one tar, from mmdebstrap (minbase: apt, dpkg and the Essential set)."""
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap is not installed: apt-get install mmdebstrap (Debian's chroot builder)")
    if not SOURCES.is_file():
        raise ImageError(f"no Debian sources at {SOURCES}: set STANDIN_DEBIAN_SOURCES to a deb822 sources file")
    hooks = []
    if "busybox-static" in image.debs:
        hooks.append('chroot "$1" /bin/busybox --install -s /bin')
    if image.pip:
        # Downloaded by this machine's pip (its index and certificates; the chroot has neither), installed
        # in the chroot from those files alone. This Python is 3.11 as Debian 12's is: the same wheels.
        wheels = tar_path.parent / "wheels"
        _run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels), *image.pip],
             "pip download", image)  # fmt: skip
        pins = " ".join(f"'{p}'" for p in image.pip)
        hooks.append(f'cp -r "{wheels}" "$1/tmp/wheels"')
        hooks.append(f'chroot "$1" python3 -m pip install -q --no-index --find-links /tmp/wheels --break-system-packages {pins}')
        hooks.append('rm -rf "$1/tmp/wheels"')
    hooks.extend(image.hooks)
    for target, source in image.files.items():
        hooks.append(f'mkdir -p "$1{Path(target).parent}" && cp -r "{source}" "$1{target}"')
    hooks.append('find "$1/opt" -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null; true')
    hooks.append('rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*')
    debs = [*image.debs, *(("python3-pip",) if image.pip else ())]
    command = [
        "mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
        f"--include={','.join(debs)}",
        *[f"--customize-hook={h}" for h in hooks],
        SUITE, str(tar_path), str(SOURCES),
    ]  # fmt: skip
    _run(command, "mmdebstrap", image)


def _blob(folder: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (folder / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (folder / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def _oci_archive(image: StandIn, rootfs_tar: Path, archive: Path) -> None:
    """An OCI image layout (one layer: the root filesystem) in a tar, as `ctr images import` reads it."""
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        layout = Path(tmp)
        raw = rootfs_tar.read_bytes()
        diff_id = f"sha256:{hashlib.sha256(raw).hexdigest()}"
        layer, layer_size = _blob(layout, gzip.compress(raw, compresslevel=1, mtime=0))
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": list(image.env), "Cmd": list(image.cmd), "Labels": {STAND_IN_LABEL: image.stands_in_for}},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
        config_digest, config_size = _blob(layout, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": layer_size}],
            "annotations": {STAND_IN_LABEL: image.stands_in_for},
        }
        manifest_digest, manifest_size = _blob(layout, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest_size,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {REFERENCE_ANNOTATION: image.name, "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[-1]},
            }],
        }  # fmt: skip
        (layout / "index.json").write_text(json.dumps(index))
        (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        partial = archive.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            for path in sorted(layout.rglob("*")):
                tar.add(path, arcname=path.relative_to(layout).as_posix(), recursive=False)
        partial.rename(archive)


def ensure(names: Iterable[str] = (), say: Say = print) -> dict[str, Path]:
    """Each named stand-in's OCI archive (none named: those not built on demand), built where missing
    (minutes), reused where present."""
    CACHE.mkdir(parents=True, exist_ok=True)
    archives = {}
    for name in names or ALWAYS:
        image = STAND_INS[normalise(name)]
        if not image.archive.is_file():
            say(f"building stand-in {image.name} from Debian {SUITE} ({', '.join(image.debs)}"
                + (f"; pip {', '.join(image.pip)}" if image.pip else "") + ") ...")  # fmt: skip
            with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
                rootfs = Path(tmp) / "rootfs.tar"
                _rootfs(image, rootfs)
                _oci_archive(image, rootfs, image.archive)
            say(f"  {image.name}: {image.archive.stat().st_size / 2**20:.0f} MiB")
            for stale in CACHE.glob(image.archive.name.replace(image.key(), "?" * len(image.key()))):
                if stale != image.archive:  # the same image as an earlier recipe or project tree made it
                    stale.unlink()
        archives[image.name] = image.archive
    return archives


def manifest_labels(archive: Path) -> dict[str, str]:
    """The stand-in label of an archive's image, read back from its config (what a report quotes)."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        blob = lambda d: json.load(tar.extractfile(f"blobs/sha256/{d.split(':')[1]}"))  # noqa: E731
        manifest = blob(index["manifests"][0]["digest"])
        return blob(manifest["config"]["digest"])["config"].get("Labels", {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("images", nargs="*", help="references (default: every stand-in not built on demand)")
    args = parser.parse_args(argv)
    try:
        for name, archive in ensure(args.images).items():
            print(f"{name}: {archive.relative_to(REPO)}")
    except (ImageError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
