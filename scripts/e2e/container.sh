#!/usr/bin/env bash
# End-to-end: the container image. The Dockerfile at the repository root is built with
# podman (Debian's, with runc) and run as an operator would: non-root, ports published
# on loopback, a named volume for the swarms. Announces over UDP, HTTP and ws go into
# it; its HEALTHCHECK (`shoal health`) passes; `podman stop` ends it cleanly with the
# snapshots written to the volume. Under podman's default seccomp profile, which (as
# Docker's) hides io_uring, the HTTP and WebTorrent trackers must say they serve on
# epoll.
#
# No registry is reachable from these machines, so the image's two bases are stand-ins
# built here: BASE_IMAGE is a debootstrapped bookworm minbase (lib/rootfs.bash, the
# same cached tarball systemd.sh boots), and BINARY_FROM=prebuilt takes the tests'
# own shoal binary (stripped) instead of compiling in the rust image. Everything from
# the runtime stage on (user, config, environment, health check, entrypoint) is the
# Dockerfile's own.
#
# The compose file and the Kubernetes manifests in packaging/ are checked by what can
# run here: their files exist, their ports and probes match the image, the
# Prometheus config passes `promtool check config` with the shipped alert rules.
#
# Needs: root, podman and runc (installed when missing).
source "$(dirname "$0")/lib/common.bash"
source "$(dirname "$0")/lib/rootfs.bash"
e2e_init container

[ "$(id -u)" -eq 0 ] || skip_loudly "podman's networks and the image build need root here"
need_apt podman runc binutils prometheus python3-yaml
shoal=$(tracker_bin shoal)

tag="e2e-$$"
base="localhost/shoal-e2e/debian:$tag"
image="localhost/shoal-e2e/shoal:$tag"
volume="shoal-e2e-$$"
name="shoal-e2e-$$"
# crun refuses a host with cgroups in hybrid mode (these machines); runc takes it.
# Limits no higher than ours: a container may not raise them.
engine=(podman --runtime runc)
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
cleanup_podman() {
    podman rm -f "$name" >/dev/null 2>&1 || true
    podman volume rm -f "$volume" >/dev/null 2>&1 || true
    podman rmi -f "$image" "$base" >/dev/null 2>&1 || true
}

# --- the image ------------------------------------------------------------------
debian_rootfs "$WORK/rootfs"
tar -C "$WORK/rootfs" -c . | podman import - "$base" >"$WORK/import.log" 2>&1 ||
    fail "podman import of the stand-in base failed (see import.log)"
rm -rf "$WORK/rootfs"
context="$WORK/context"
mkdir -p "$context/target/release"
cp "$REPO_ROOT/Dockerfile" "$REPO_ROOT/.dockerignore" "$context/"
strip --strip-debug -o "$context/target/release/shoal" "$shoal"
"${engine[@]}" build "${limits[@]}" --format docker --build-arg "BASE_IMAGE=$base" \
    --build-arg BINARY_FROM=prebuilt -t "$image" "$context" >"$WORK/build.log" 2>&1 ||
    { cleanup_podman; fail "podman build failed (see build.log)"; }
config=$(podman image inspect "$image" --format '{{.Config.User}}|{{json .Config.Healthcheck.Test}}|{{json .Config.ExposedPorts}}')
case $config in
"shoal:shoal|"*'shoal","health"'*'6969/udp'*'8000/tcp'*) ;;
*) cleanup_podman; fail "the image's user, health check or ports are not what the Dockerfile says: $config" ;;
esac
say "image built with podman $(podman --version | cut -d' ' -f3): user shoal, health check, ports 6969/udp 6969/tcp 8000/tcp 9969/tcp"

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
podman volume create "$volume" >/dev/null
start_bg container "${engine[@]}" run --rm --name "$name" "${limits[@]}" \
    -p "127.0.0.1:$tracker_port:6969/udp" -p "127.0.0.1:$tracker_port:6969/tcp" \
    -p "127.0.0.1:$ws_port:8000/tcp" -v "$volume:/var/lib/shoal" "$image"
deadline=$((SECONDS + 30))
until grep -q 'metrics, statistics and health on' "$WORK/container.log"; do
    running container || { cleanup_podman; fail "the container exited at start"; }
    [ "$SECONDS" -lt "$deadline" ] || { cleanup_podman; fail "the container did not start within 30 s"; }
    sleep 0.2
done
for tracker in http ws; do
    grep -q "$tracker: serving with epoll, since io_uring cannot be used here" "$WORK/container.log" ||
        grep -q "$tracker: socket workers run on io_uring" "$WORK/container.log" ||
        { cleanup_podman; fail "$tracker does not say which backend it serves on"; }
done
say "running as $(podman exec "$name" id -un), UDP and HTTP on 127.0.0.1:$tracker_port, ws on :$ws_port; $(grep -o 'http: serving with epoll\|http: socket workers run on io_uring' "$WORK/container.log" | head -n1)"

hash=cccccccccccccccccccccccccccccccccccccccc
announce() { python3 "$E2E_DIR/lib/announce.py" "$@"; }
for url in "udp://127.0.0.1:$tracker_port/announce" "http://127.0.0.1:$tracker_port/announce"; do
    announce "$url" "$hash" --seeder --expect-peers 0 >/dev/null ||
        { cleanup_podman; fail "announce to $url failed"; }
    out=$(announce "$url" "$hash" --port 6882 --expect-peers 1) ||
        { cleanup_podman; fail "a second peer at $url did not get the first: $out"; }
done
out=$(announce "ws://127.0.0.1:$ws_port/" "$hash" --seeder --expect-peers 0) ||
    { cleanup_podman; fail "WebTorrent announce failed: $out"; }
say "announces over UDP, HTTP and ws answered through the published ports"

podman healthcheck run "$name" >"$WORK/health.log" 2>&1 ||
    { cleanup_podman; fail "the image's HEALTHCHECK failed: $(cat "$WORK/health.log")"; }
say "HEALTHCHECK (shoal health): healthy"

stop_bg container
grep -q 'state: wrote /var/lib/shoal/udp.snapshot' "$WORK/container.log" ||
    { cleanup_podman; fail "podman stop did not write the UDP snapshot"; }
mountpoint=$(podman volume inspect "$volume" --format '{{.Mountpoint}}')
[ "$(stat -c '%u %a' "$mountpoint/udp.snapshot")" = "10001 600" ] ||
    { cleanup_podman; fail "the snapshot in the volume is not the shoal user's, 0600"; }
say "podman stop: clean exit, snapshots in the volume"

# The entrypoint's subcommand with nothing running: unhealthy, and says why.
if "${engine[@]}" run --rm "${limits[@]}" "$image" health >"$WORK/health-none.log" 2>&1; then
    cleanup_podman
    fail "shoal health passed with no tracker running"
fi
grep -q 'cannot ask http://127.0.0.1:9969/health' "$WORK/health-none.log" ||
    { cleanup_podman; fail "shoal health did not say why: $(cat "$WORK/health-none.log")"; }
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
