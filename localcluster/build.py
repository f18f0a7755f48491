"""Builds the local cluster's binaries from the Go modules under localcluster/gomod/, once.

Each build module pins its versions in its own go.mod and names the binaries it builds in its `tool`
lines. Its binaries land in `.cache/bin/<module>-<key>/`, where the key digests everything that
decides them (go.mod, go.sum, the Go release, the flags); a module whose folder exists is reused and
nothing is compiled. Go's module and build caches are Go's defaults. Every binary keeps Go's build
info (`go version -m BINARY` names the modules it came from): `-s -w` drops only the debug symbols.

    python -m localcluster.build            # every module but those built when named (keda)
    python -m localcluster.build kube kwok  # only these
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOMOD = REPO / "localcluster" / "gomod"
CACHE = REPO / ".cache" / "bin"
PROGRESS_EVERY_S = 15.0

Say = Callable[[str], None]


class BuildError(Exception):
    """A module did not build (or Go is missing): one line naming the module and what failed."""


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _go(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise BuildError("go is not on PATH: the local cluster is built from Go modules (Go 1.26 or newer)") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise BuildError(f"go {' '.join(args)} in {_shown(cwd)}: {last}")
    return done.stdout


@dataclass(frozen=True)
class Module:
    """One go.mod under localcluster/gomod/: the binaries of its `tool` lines, built in one `go build`."""

    name: str
    # Go names a binary after its package path (go.etcd.io/etcd/server/v3 -> "server"); ours by what it is.
    rename: dict[str, str] = field(default_factory=dict)
    # `-X` flags stamping the version a binary reports, from the module it comes from (see ldflags).
    version_vars: Callable[[dict[str, str]], dict[str, str]] = lambda versions: {}
    # Files a main package of ours embeds, written from its dependency before it builds.
    prepare: Callable[[Module], None] | None = None
    # Build tags, as the component's own release build sets them (its Makefile).
    tags: tuple[str, ...] = ()
    # Built only when named: its build is long and only one local run needs it.
    on_demand: bool = False

    @property
    def folder(self) -> Path:
        return GOMOD / self.name

    def edit_json(self) -> dict:
        return json.loads(_go(["mod", "edit", "-json"], self.folder))

    def binaries(self) -> list[str]:
        names = []
        for tool in self.edit_json().get("Tool") or []:
            parts = tool["Path"].split("/")
            # A trailing major-version element (/v3) is not the command's name, as Go's own rule says.
            base = parts[-2] if len(parts) > 1 and parts[-1][:1] == "v" and parts[-1][1:].isdigit() else parts[-1]
            names.append(self.rename.get(base, base))
        return names

    def versions(self) -> dict[str, str]:
        """The version go.mod pins for each module it requires (a replace line's where it has one)."""
        edit = self.edit_json()
        versions = {r["Path"]: r["Version"] for r in edit.get("Require") or []}
        return versions | {r["Old"]["Path"]: r["New"].get("Version", "") for r in edit.get("Replace") or []}

    def ldflags(self) -> str:
        versions = self.versions()
        stamps = " ".join(f"-X {var}={value}" for var, value in sorted(self.version_vars(versions).items()))
        return f"-s -w {stamps}".strip()

    def flags(self) -> list[str]:
        return [*BUILD_FLAGS, *([f"-tags={','.join(self.tags)}"] if self.tags else [])]

    def key(self, go_version: str) -> str:
        digest = hashlib.sha256()
        for part in (go_version, self.ldflags(), " ".join(self.flags())):
            digest.update(part.encode() + b"\0")
        for path in [self.folder / "go.mod", self.folder / "go.sum", *sorted(self.folder.rglob("*.go"))]:
            digest.update(path.relative_to(self.folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()[:12]


def _kubernetes(versions: dict[str, str]) -> dict[str, str]:
    # What the Kubernetes release build stamps (hack/lib/version.sh): the API server's /version and
    # every component's --version then name the release, as a provider's version checks expect.
    version = versions["k8s.io/kubernetes"]
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {}
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps |= {
            f"{package}.gitVersion": version,
            f"{package}.gitMajor": major,
            f"{package}.gitMinor": minor,
            f"{package}.gitTreeState": "clean",
        }
    return stamps


PROVIDER = "github.com/pulumi/pulumi-kubernetes/provider/v4"


def _provider_version(versions: dict[str, str]) -> str:
    return versions[PROVIDER].lstrip("v")  # Pulumi plugin versions are semver without the v


def _provider_embeds(module: Module) -> None:
    """What the provider's release build generates for its main package (`go generate` there): its
    schema stamped with the version, and its Terraform mapping, from the provider module itself."""
    download = json.loads(_go(["mod", "download", "-json", f"{PROVIDER}@{module.versions()[PROVIDER]}"], module.folder))
    source = Path(download["Dir"]) / "cmd" / "pulumi-resource-kubernetes"
    target = module.folder / "cmd" / "pulumi-resource-kubernetes"
    schema = json.loads((source / "schema.json").read_text())
    schema["version"] = _provider_version(module.versions())
    (target / "schema-embed.json").write_text(json.dumps(schema))
    shutil.copyfile(source / "terraform-mapping.json", target / "terraform-mapping-embed.json")


MODULES: dict[str, Module] = {
    m.name: m
    for m in (
        Module("kube", rename={"server": "etcd"}, version_vars=_kubernetes),
        Module("kwok"),  # kwok carries its version in its source
        Module(
            "pulumi",
            version_vars=lambda v: {"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version": v["github.com/pulumi/pulumi/pkg/v3"]},
        ),
        Module(
            "pulumi-kubernetes",
            version_vars=lambda v: {f"{PROVIDER}/pkg/version.Version": _provider_version(v)},
            prepare=_provider_embeds,
        ),
        # The lab's controllers (localcluster.controllers), stamped as their release builds stamp them, so
        # the version each logs at start is the one it was built from.
        Module("kueue", version_vars=lambda v: {"sigs.k8s.io/kueue/pkg/version.GitVersion": v["sigs.k8s.io/kueue"]}),
        Module("jobset", version_vars=lambda v: {"sigs.k8s.io/jobset/pkg/version.GitVersion": v["sigs.k8s.io/jobset"]}),
        Module("trainer"),  # its controller reports no version of its own
        # The real node (localcluster.realnode): the container runtime, the OCI runtime, the pod network's
        # plugins and cluster DNS, each stamped as its release build stamps it, so the node reports them.
        Module(
            "containerd",
            version_vars=lambda v: {"github.com/containerd/containerd/v2/version.Version": v["github.com/containerd/containerd/v2"]},
            tags=("no_btrfs",),  # its btrfs snapshotter needs btrfs headers; the node uses overlayfs
        ),
        Module(
            "runc",
            version_vars=lambda v: {"main.version": v["github.com/opencontainers/runc"].lstrip("v")},
            # As its Makefile, less libpathrs (a Rust library; runc falls back to its Go path resolution).
            # seccomp (libseccomp through cgo) is what RuntimeDefault profiles of Restricted pods need.
            tags=("seccomp", "urfave_cli_no_docs"),
        ),
        Module(
            "cni",
            version_vars=lambda v: {
                "github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion": v["github.com/containernetworking/plugins"]
            },
        ),
        Module("coredns"),  # its version is a constant in its source
        # KEDA (the g6 autoscale run on the local cluster): long to build cold, so built when named.
        Module(
            "keda",
            rename={"operator": "keda", "adapter": "keda-adapter"},  # the names of KEDA's own Makefile
            version_vars=lambda v: {"github.com/kedacore/keda/v2/version.Version": v["github.com/kedacore/keda/v2"]},
            on_demand=True,
        ),
        # The g8 bucket's stand-in on the local cluster (a Cloud Storage emulator): built when named.
        Module("gcs", on_demand=True),  # its version is a constant in its source
    )
}
DEFAULT_MODULES = tuple(name for name, m in MODULES.items() if not m.on_demand)
BUILD_FLAGS = ("-trimpath", "-buildvcs=false")


@dataclass(frozen=True)
class Built:
    """Where each module's binaries are: put `path` first on PATH and every binary is found by name."""

    folders: dict[str, Path]

    def binary(self, name: str) -> Path:
        for folder in self.folders.values():
            if (folder / name).is_file():
                return folder / name
        raise KeyError(f"no binary {name!r} among {', '.join(self.folders)}")

    @property
    def path(self) -> str:
        return os.pathsep.join(str(f) for f in self.folders.values())


def _compile(module: Module, final: Path, say: Say) -> None:
    """One `go build` for the whole module into a fresh folder, renamed into place only when whole."""
    staging = final.with_name(final.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _build_into(module, staging, say)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rename(final)


def _build_into(module: Module, staging: Path, say: Say) -> None:
    log_dir = CACHE / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{module.name}.log"
    if module.prepare:
        module.prepare(module)
    total = len(_go(["list", "-deps", "tool"], module.folder).split())
    command = ["go", "build", *module.flags(), "-v", f"-ldflags={module.ldflags()}", "-o", f"{staging}/", "tool"]
    started = time.monotonic()
    compiled = 0
    with log_path.open("w") as log:
        log.write(" ".join(command) + "\n")
        process = subprocess.Popen(
            command, cwd=module.folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        stop = threading.Event()

        def report() -> None:
            while not stop.wait(PROGRESS_EVERY_S):
                say(f"  {module.name}: {compiled} of {total} packages compiled, {time.monotonic() - started:.0f} s")

        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                # `go build -v` prints each package as it compiles it; other lines are errors.
                if line and not line.startswith(("#", " ", "\t")) and " " not in line.strip():
                    compiled += 1
            code = process.wait()
        finally:
            stop.set()
            if process.poll() is None:
                process.kill()
                process.wait()
    if code != 0:
        # The first compiler or go-command message: not a package name, not the "# package" header.
        errors = [ln.strip() for ln in log_path.read_text().splitlines()[1:] if " " in ln.strip() and not ln.startswith("#")]
        first = errors[0] if errors else f"go build exited {code}"
        raise BuildError(
            f"module localcluster/gomod/{module.name} did not build: {first} (whole log: {_shown(log_path)})"
        )
    for old, new in module.rename.items():
        (staging / old).rename(staging / new)
    missing = [b for b in module.binaries() if not (staging / b).is_file()]
    if missing:
        raise BuildError(f"module localcluster/gomod/{module.name} built but {', '.join(missing)} is missing")
    say(f"  {module.name}: built {', '.join(module.binaries())} in {time.monotonic() - started:.0f} s")


def ensure(names: Iterable[str] = DEFAULT_MODULES, say: Say = print) -> Built:
    """Every named module's binaries, built where missing; reused (nothing compiled) where present."""
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        raise BuildError(f"unknown build module(s) {', '.join(unknown)}; modules: {', '.join(MODULES)}")
    go_version = _go(["env", "GOVERSION"], REPO).strip()
    folders, built = {}, []
    for name in names:
        module = MODULES[name]
        final = CACHE / f"{name}-{module.key(go_version)}"
        if not all((final / b).is_file() for b in module.binaries()):
            say(f"building {name} ({', '.join(module.binaries())}) from localcluster/gomod/{name} with {go_version} ...")
            _compile(module, final, say)
            built.append(name)
        folders[name] = final
    reused = [n for n in names if n not in built]
    if reused:
        say(f"reused {', '.join(reused)} from .cache/bin/ (nothing to build)" if not built else f"reused {', '.join(reused)}")
    return Built(folders)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.build", description=__doc__.split("\n\n")[0])
    on_demand = ", ".join(n for n in MODULES if n not in DEFAULT_MODULES)
    parser.add_argument("modules", nargs="*", default=list(DEFAULT_MODULES),
                        help=f"build modules (default {', '.join(DEFAULT_MODULES)}; built when named: {on_demand})")
    args = parser.parse_args(argv)
    try:
        built = ensure(args.modules)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name, folder in built.folders.items():
        print(f"{name}: {_shown(folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
