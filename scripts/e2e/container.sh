#!/usr/bin/env bash
# End-to-end: the container image. The Dockerfile at the repository root is built as
# documented, `podman build -t shoal .` in the repository with nothing else on the
# command line (Debian's podman, with runc), then run as an operator would: non-root,
# ports published on loopback, a named volume for the swarms. Announces over UDP,
# HTTP and ws go into it; its HEALTHCHECK (`shoal health`) passes; `podman stop` ends
# it cleanly with the snapshots written to the volume. Under podman's default seccomp
# profile, which (as Docker's) refuses io_uring, the HTTP and WebTorrent trackers
# serve on epoll, their default, and say so at info level with no warning.
#
# No registry is reachable from these machines, so the Dockerfile's two default
# images are stand-ins built here, under the very names the Dockerfile's ARGs give,
# in an image store of this test's own (nothing of the machine's store is touched):
# the runtime image is a debootstrapped bookworm minbase (lib/rootfs.bash, the same
# cached tarball systemd.sh boots); the toolchain image is the same with a stand-in
# `cargo` that accepts only the build stage's command and puts the tests' own binary
# where `cargo build --release -p shoal` would (compiling in the image would take 10
# minutes of CI's two cores and test the toolchain, not the Dockerfile). Everything
# else is the Dockerfile's own: the stage graph, the build context and .dockerignore
# (the stand-in fails if target/ was sent), strip, the user, config, environment,
# health check and entrypoint.
#
# The compose file and the Kubernetes manifests in packaging/ are checked by what can
# run here: their files exist, their ports and probes match the image, the
# Prometheus config passes `promtool check config` with the shipped alert rules.
#
# Needs: root, podman and runc (installed when missing).
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/rootfs.bash"
e2e_init container

[ "$(id -u)" -eq 0 ] || skip_loudly root "podman's networks and the image build need root here"
need_apt podman runc binutils prometheus python3-yaml
shoal=$(tracker_bin shoal)

volume="shoal-e2e-$$"
container="shoal-e2e-$$"
# An image store of this test's own: the stand-ins may take the default images' names.
# crun refuses a host with cgroups in hybrid mode (these machines); runc takes it.
store="$WORK/store"
engine=(podman --root "$store/root" --runroot "$store/run" --runtime runc)
# Run limits no higher than ours: a container may not raise them.
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
cleanup_podman() {
    "${engine[@]}" rm -f "$container" >/dev/null 2>&1 || true
    "${engine[@]}" volume rm -f "$volume" >/dev/null 2>&1 || true
    "${engine[@]}" system reset --force >/dev/null 2>&1 || true
}
on_cleanup cleanup_podman

# --- the stand-in images ----------------------------------------------------------
default_image() {
    sed -n "s/^ARG $1=//p" "$REPO_ROOT/Dockerfile" | head -n1
}
rust_image=$(default_image RUST_IMAGE)
base_image=$(default_image BASE_IMAGE)
[ -n "$rust_image" ] && [ -n "$base_image" ] || fail "the Dockerfile names no default RUST_IMAGE or BASE_IMAGE"
debian_rootfs "$WORK/rootfs"
tar -C "$WORK/rootfs" -c . | "${engine[@]}" import - "$base_image" >"$WORK/import.log" 2>&1 ||
    fail "podman import of the stand-in $base_image failed (see import.log)"
install -D -m 0755 "$shoal" "$WORK/rootfs/usr/local/lib/shoal-e2e/shoal"
cat >"$WORK/rootfs/usr/local/bin/cargo" <<'CARGO'
#!/bin/sh
# Stand-in for the toolchain image's cargo (scripts/e2e/container.sh).
set -e
[ "$*" = "build --release --locked -p shoal" ] ||
    { echo "stand-in cargo: not the Dockerfile's build command: cargo $*" >&2; exit 2; }
[ -f Cargo.lock ] && [ -f crates/shoal/Cargo.toml ] && [ -f crates/shoal/src/main.rs ] ||
    { echo "stand-in cargo: the build context holds no shoal workspace in $PWD" >&2; exit 2; }
[ ! -e target ] ||
    { echo "stand-in cargo: target/ was sent in the build context (.dockerignore)" >&2; exit 2; }
mkdir -p target/release
cp /usr/local/lib/shoal-e2e/shoal target/release/shoal
CARGO
chmod 0755 "$WORK/rootfs/usr/local/bin/cargo"
tar -C "$WORK/rootfs" -c . | "${engine[@]}" import - "$rust_image" >>"$WORK/import.log" 2>&1 ||
    fail "podman import of the stand-in $rust_image failed (see import.log)"
rm -rf "$WORK/rootfs"
say "stand-ins for $rust_image and $base_image in a store of this test's own"

# --- the image, built as documented ------------------------------------------------
(cd "$REPO_ROOT" && "${engine[@]}" build -t shoal .) >"$WORK/build.log" 2>&1 ||
    fail "podman build -t shoal . failed (see build.log): $(tail -n 5 "$WORK/build.log")"
say "podman build -t shoal . (podman $(podman --version | cut -d' ' -f3)): built"
# podman's default image format is OCI, which has no HEALTHCHECK: the deployment guide
# says to add --format docker with podman, and that image is the one run below.
(cd "$REPO_ROOT" && "${engine[@]}" build --format docker -t shoal .) >"$WORK/build-docker.log" 2>&1 ||
    fail "podman build --format docker -t shoal . failed (see build-docker.log)"
image=localhost/shoal:latest
"${engine[@]}" run --rm --no-healthcheck "${limits[@]}" "$image" --version >"$WORK/version.log" 2>"$WORK/version-errors.log" ||
    fail "the image's shoal --version failed: $(cat "$WORK/version-errors.log")"
cmp -s <("$shoal" --version) "$WORK/version.log" ||
    fail "the image holds another binary than the one the build stage made: $(cat "$WORK/version.log")"
config=$("${engine[@]}" image inspect "$image" --format '{{.Config.User}}|{{json .Config.Healthcheck.Test}}|{{json .Config.ExposedPorts}}')
case $config in
"shoal:shoal|"*'shoal","health"'*'6969/udp'*'8000/tcp'*) ;;
*) fail "the image's user, health check or ports are not what the Dockerfile says: $config" ;;
esac
"${engine[@]}" run --rm --no-healthcheck "${limits[@]}" --entrypoint /bin/sh "$image" -c 'test ! -e /usr/local/bin/cargo' ||
    fail "the runtime image holds something of the build stage"
say "--format docker: user shoal, health check, ports 6969/udp 6969/tcp 8000/tcp 9969/tcp; the build stage's binary and nothing else of it"

# --- run it ------------------------------------------------------------------------
free_port() {
    # A port free for both TCP and UDP on loopback (the image serves UDP and HTTP on
    # the same number).
    python3 -c '
import socket
while True:
    t = socket.socket(); t.bind(("127.0.0.1", 0)); port = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", port)); print(port); break
    except OSError:
        pass'
}
tracker_port=$(free_port)
ws_port=$(free_port)
"${engine[@]}" volume create "$volume" >/dev/null
start_bg container "${engine[@]}" run --rm --name "$container" "${limits[@]}" \
    -p "127.0.0.1:$tracker_port:6969/udp" -p "127.0.0.1:$tracker_port:6969/tcp" \
    -p "127.0.0.1:$ws_port:8000/tcp" -v "$volume:/var/lib/shoal" "$image"
deadline=$((SECONDS + 30))
until grep -q 'metrics, statistics and health on' "$WORK/container.log"; do
    running container || fail "the container exited at start"
    [ "$SECONDS" -lt "$deadline" ] || fail "the container did not start within 30 s"
    sleep 0.2
done
for tracker in http ws; do
    grep -q "INFO .*$tracker: socket workers run on epoll" "$WORK/container.log" ||
        fail "$tracker does not say at info level that it serves on epoll: $(grep "$tracker:" "$WORK/container.log" | head -n 3)"
done
if grep -q ' WARN ' "$WORK/container.log"; then
    fail "the image warns at start with its default config: $(grep ' WARN ' "$WORK/container.log")"
fi
say "running as $("${engine[@]}" exec "$container" id -un), UDP and HTTP on 127.0.0.1:$tracker_port, ws on :$ws_port; HTTP and WebTorrent on epoll (said at info level), no warning"

hash=cccccccccccccccccccccccccccccccccccccccc
announce() { python3 "$E2E_DIR/lib/announce.py" "$@"; }
for url in "udp://127.0.0.1:$tracker_port/announce" "http://127.0.0.1:$tracker_port/announce"; do
    announce "$url" "$hash" --seeder --expect-peers 0 >/dev/null ||
        fail "announce to $url failed"
    out=$(announce "$url" "$hash" --port 6882 --expect-peers 1) ||
        fail "a second peer at $url did not get the first: $out"
done
out=$(announce "ws://127.0.0.1:$ws_port/" "$hash" --seeder --expect-peers 0) ||
    fail "WebTorrent announce failed: $out"
say "announces over UDP, HTTP and ws answered through the published ports"

"${engine[@]}" healthcheck run "$container" >"$WORK/health.log" 2>&1 ||
    fail "the image's HEALTHCHECK failed: $(cat "$WORK/health.log")"
say "HEALTHCHECK (shoal health): healthy"

stop_bg container
grep -q 'state: wrote /var/lib/shoal/udp.snapshot' "$WORK/container.log" ||
    fail "podman stop did not write the UDP snapshot"
mountpoint=$("${engine[@]}" volume inspect "$volume" --format '{{.Mountpoint}}')
[ "$(stat -c '%u %a' "$mountpoint/udp.snapshot")" = "10001 600" ] ||
    fail "the snapshot in the volume is not the shoal user's, 0600"
say "podman stop: clean exit, snapshots in the volume"

# The entrypoint's subcommand with nothing running: unhealthy, and says why.
if "${engine[@]}" run --rm --no-healthcheck "${limits[@]}" "$image" health >"$WORK/health-none.log" 2>&1; then
    fail "shoal health passed with no tracker running"
fi
grep -q 'cannot ask http://127.0.0.1:9969/health' "$WORK/health-none.log" ||
    fail "shoal health did not say why: $(cat "$WORK/health-none.log")"
cleanup_podman

# --- the examples ------------------------------------------------------------------------
python3 - "$REPO_ROOT" <<'PY' || fail "the compose file or the Kubernetes manifests do not match the image"
import os, sys, yaml
root = sys.argv[1]
compose_path = f"{root}/packaging/container/compose.yaml"
compose = yaml.safe_load(open(compose_path))
services = compose["services"]
assert set(services) >= {"shoal", "prometheus", "grafana"}, services.keys()
here = os.path.dirname(compose_path)
for service in services.values():
    for volume in service.get("volumes", []):
        source = volume.split(":")[0]
        if source.startswith("."):
            path = os.path.normpath(os.path.join(here, source))
            assert os.path.exists(path), f"compose mounts {source}, which does not exist"
    build = service.get("build")
    if build:
        assert os.path.exists(os.path.join(here, build["context"], build.get("dockerfile", "Dockerfile")))
ports = " ".join(services["shoal"]["ports"])
for port in ("6969:6969/udp", "6969:6969/tcp", "8000:8000"):
    assert port in ports, f"compose publishes no {port}"
docs = [d for d in yaml.safe_load_all(open(f"{root}/packaging/kubernetes/shoal.yaml")) if d]
kinds = {d["kind"] for d in docs}
assert {"StatefulSet", "Service", "ConfigMap"} <= kinds, kinds
pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
container = pod["containers"][0]
assert container["securityContext"]["runAsUser"] == 10001
assert container["securityContext"]["runAsNonRoot"] is True
for probe in ("livenessProbe", "readinessProbe"):
    assert container[probe]["httpGet"] == {"path": "/health", "port": 9969}, container[probe]
assert {p["containerPort"] for p in container["ports"]} == {6969, 8000, 9969}
mounts = {m["mountPath"] for m in container["volumeMounts"]}
assert {"/var/lib/shoal", "/etc/shoal"} <= mounts, mounts
print("compose and kubernetes: files present, ports, probes and user match the image")
PY
prom="$WORK/prometheus"
mkdir -p "$prom"
cp "$REPO_ROOT/packaging/container/prometheus.yml" "$prom/"
cp "$REPO_ROOT/packaging/prometheus/shoal-alerts.yml" "$prom/"
promtool check config "$prom/prometheus.yml" >"$WORK/promtool.log" 2>&1 ||
    fail "promtool check config: $(cat "$WORK/promtool.log")"
say "compose's prometheus.yml passes promtool check config with the shipped alert rules"
say "passed in $((SECONDS - E2E_START))s"
