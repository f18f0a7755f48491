# Starts Triton on the GPU for the g5 Triton predictor (run as `sh -c <this> tritonserver <args>`:
# KServe appends the ClusterServingRuntime's args after our command, so $0 is the server and $@ its
# flags). KServe's public CIFAR-10 example pins `instance_group { kind: KIND_CPU }` in its
# config.pbtxt, so as published Triton would hold the L4 and compute on the CPU. KServe mounts the
# downloaded model read-only, so we copy it to a writable emptyDir, switch KIND_CPU to KIND_GPU and
# point --model-store at the copy. A bare model folder (config.pbtxt at the top, as in the bucket's
# models/torchscript/cifar10) becomes a one-model repository named after its config's `name`.
# MODEL_DIR, REPO_DIR and TRITON_ENTRYPOINT exist for tests; the pod uses the defaults.
set -eu
src="${MODEL_DIR:-/mnt/models}"
dst="${REPO_DIR:-/tmp/models}"
rm -rf "$dst"
mkdir -p "$dst"
if [ -f "$src/config.pbtxt" ]; then
  name=$(sed -n 's/^name: *"\([^"]*\)".*/\1/p' "$src/config.pbtxt" | head -n 1)
  if [ -z "$name" ]; then
    echo "triton_start: $src/config.pbtxt has no top-level name" >&2
    exit 1
  fi
  cp -R "$src" "$dst/$name"
else
  cp -R "$src/." "$dst/"
fi
chmod -R u+w "$dst"  # the copy keeps the source's modes; sed -i needs to write beside each file
find "$dst" -name config.pbtxt -exec sed -i 's/KIND_CPU/KIND_GPU/' {} +
find "$dst" -name config.pbtxt -exec grep -H "kind:" {} + || true  # into the log: where each instance goes
server="$0"
for arg in "$@"; do
  shift
  case "$arg" in
    --model-store=* | --model-repository=*) arg="--model-store=$dst" ;;
  esac
  set -- "$@" "$arg"
done
# Triton pins a host memory pool at start (256 MiB unless told, `tritonserver --help`), and pinned
# pages count against the pod's memory limit beside the CUDA context: 64 MiB is ample for CIFAR-10
# (12 KiB an image) and leaves the limit to the server and its backend.
set -- "$@" "--pinned-memory-pool-byte-size=67108864"
# NVIDIA's image entrypoint sets up CUDA forward compatibility before the server starts.
entry="${TRITON_ENTRYPOINT:-/opt/nvidia/nvidia_entrypoint.sh}"
if [ -x "$entry" ]; then
  exec "$entry" "$server" "$@"
fi
exec "$server" "$@"
