#!/usr/bin/env bash
# Builds kanon's container image (Containerfile): a static release binary of kanon, checked, then
# the image `FROM scratch` around it, checked too.
#
# 1. `cargo build --release` of kanon for x86_64-unknown-linux-gnu with a statically linked C
#    library (`-C target-feature=+crt-static`; the explicit --target keeps the flag away from
#    build scripts and proc macros, which must stay dynamic), symbols stripped, and randomness
#    from the getrandom system call only (getrandom's `linux_getrandom` backend: a static binary
#    would otherwise fall back to reading /dev/urandom).
# 2. The binary is static (`file`, `ldd`, no ELF interpreter), and runs: `kanon --version`,
#    `kanon crds`, and `kanon apply` on the bundled examples; as root, also in an empty root
#    directory (chroot) as user 65532, which is what the image holds.
# 3. When buildah is installed: the image, built with `--storage-driver vfs` (no daemon, no
#    privileges beyond root's, no base image to pull), then inspected: user 65532:65532,
#    entrypoint /kanon, command serve, one layer holding only /kanon; as root, the binary is run
#    again from the image's own file system. Without buildah the image is not built (said so).
#
# Running a container from the image needs a container runtime, which this script does not use.
#
# usage: scripts/build-image.sh
# env:   KANON_IMAGE   image name and tag (default kanon:VERSION, VERSION from `kanon --version`)
#        KANON_TARGET  Rust target (default x86_64-unknown-linux-gnu; must be a *-linux-gnu one)
#        KANON_REQUIRE_BUILDAH=1  fail instead of skipping the image when buildah is missing
# Exits non-zero on any failed step or check.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${KANON_TARGET:-x86_64-unknown-linux-gnu}
case "$target" in
  *-linux-gnu) ;;
  *) echo "error: KANON_TARGET=$target: only *-linux-gnu targets are supported" >&2; exit 2 ;;
esac

checked=()
skipped=()
sizes=
fail() { echo "error: $*" >&2; exit 1; }
ok() { checked+=("$*"); echo "ok: $*"; }
skip() { skipped+=("$*"); echo "skipped: $*"; }
summary() {
  echo
  echo "== summary"
  local line
  for line in "${checked[@]}"; do echo "checked:     $line"; done
  for line in "${skipped[@]}"; do echo "not checked: $line"; done
  if [ -n "$sizes" ]; then echo "image size:  $sizes"; fi
}

work=$(mktemp -d)
container=
cleanup() {
  if [ -n "$container" ]; then
    buildah --storage-driver vfs umount "$container" >/dev/null 2>&1 || true
    buildah --storage-driver vfs rm "$container" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== static release binary ($target)"
start=$SECONDS
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C strip=symbols --cfg getrandom_backend=\"linux_getrandom\"" \
  cargo build --release --locked -p kanon --target "$target"
echo "built in $((SECONDS - start)) s"
# The Containerfile copies the binary from target/; put it there when CARGO_TARGET_DIR is elsewhere.
binary=target/$target/release/kanon
built=${CARGO_TARGET_DIR:-target}/$target/release/kanon
if [ "$(realpath -m "$built")" != "$(realpath -m "$binary")" ]; then
  mkdir -p "$(dirname "$binary")"
  cp "$built" "$binary"
fi
[ -x "$binary" ] || fail "$binary was not built"
size=$(stat -c %s "$binary")
echo "$binary: $size bytes ($((size / 1024 / 1024)) MiB)"

echo "== the binary is statically linked"
if command -v file >/dev/null 2>&1; then
  description=$(file -b "$binary")
  echo "file: $description"
  case "$description" in
    *"statically linked"* | *"static-pie linked"*) ok "file: $binary is statically linked" ;;
    *) fail "file says $binary is not statically linked: $description" ;;
  esac
else
  skip "file(1): not installed"
fi
if command -v ldd >/dev/null 2>&1; then
  # ldd exits 1 for a static binary ("not a dynamic executable") with older glibc, 0 with newer
  # ("statically linked"); either way it must name no shared library.
  libraries=$(ldd "$binary" 2>&1 || true)
  echo "ldd: $libraries"
  case "$libraries" in
    *"not a dynamic executable"* | *"statically linked"*) ok "ldd: no shared library" ;;
    *) fail "ldd lists shared libraries for $binary" ;;
  esac
else
  skip "ldd: not installed"
fi
if command -v readelf >/dev/null 2>&1; then
  if readelf -l "$binary" | grep -q INTERP || readelf -d "$binary" | grep -q NEEDED; then
    fail "$binary has an ELF interpreter or NEEDED entries"
  fi
  ok "readelf: no ELF interpreter, no NEEDED library"
else
  skip "readelf: not installed"
fi

echo "== the binary runs"
version_line=$("$binary" --version)
echo "$version_line"
version=${version_line#kanon }
[ -n "$version" ] && [ "$version" != "$version_line" ] || fail "unexpected --version output: $version_line"
ok "kanon --version: $version_line"
"$binary" crds >"$work/crds.yaml"
crd_count=$(grep -c '^kind: CustomResourceDefinition' "$work/crds.yaml" || true)
# As many as the repository's crds/ holds at its top (the four policy kinds and PolicyException;
# not crds/openreports/, the OpenReports CRDs, which `kanon crds` does not print).
expected_crds=$(find crds -maxdepth 1 -name '*.yaml' | wc -l)
[ "$crd_count" -eq "$expected_crds" ] || fail "kanon crds printed $crd_count CustomResourceDefinitions, expected $expected_crds (crds/)"
ok "kanon crds: $crd_count CustomResourceDefinitions"
apply=(apply --policy examples/policies --resource examples/resources --context examples/context)
"$binary" "${apply[@]}" >"$work/apply.out"
ok "kanon apply on examples/ (exit 0, $(wc -l <"$work/apply.out") lines)"

# The same commands with nothing else on the file system (no /etc, /dev, /tmp, no C library),
# as the image's user: what the image promises, without needing a container runtime.
run_in_root() { # ROOT WHAT: runs --version, crds and apply from ROOT/kanon, chrooted, as 65532
  local root=$1 what=$2
  chroot --userspec=65532:65532 "$root" /kanon --version >/dev/null ||
    fail "kanon --version fails in $what"
  chroot --userspec=65532:65532 "$root" /kanon crds >"$work/crds-root.yaml" ||
    fail "kanon crds fails in $what"
  cmp -s "$work/crds.yaml" "$work/crds-root.yaml" || fail "kanon crds prints other CRDs in $what"
  # chroot changes to the new root's /, where examples/ is copied: the same relative paths.
  chroot --userspec=65532:65532 "$root" /kanon "${apply[@]}" >"$work/apply-root.out" ||
    fail "kanon apply fails in $what"
  cmp -s "$work/apply.out" "$work/apply-root.out" || fail "kanon apply prints otherwise in $what"
  ok "kanon --version, crds, apply in $what as 65532:65532, same output"
}
can_chroot=false
if [ "$(id -u)" -eq 0 ] && command -v chroot >/dev/null 2>&1; then
  can_chroot=true
  root="$work/root"
  mkdir -p "$root"
  cp "$binary" "$root/kanon"
  cp -r examples "$root/examples"
  chmod -R a+rX "$root"
  run_in_root "$root" "an empty root directory (chroot)"
else
  skip "running in an empty root directory: needs root and chroot"
fi

echo "== the image"
if ! command -v buildah >/dev/null 2>&1; then
  [ "${KANON_REQUIRE_BUILDAH:-0}" = 1 ] && fail "buildah is not installed (KANON_REQUIRE_BUILDAH=1)"
  skip "the image: buildah is not installed (apt-get install buildah), nothing built"
  summary
  exit 0
fi
bah=(buildah --storage-driver vfs)
image=${KANON_IMAGE:-kanon:$version}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# A rebuild moves the tag; the image it leaves behind is removed after the build.
previous=$("${bah[@]}" images --quiet --no-trunc "$image" 2>/dev/null || true)
start=$SECONDS
"${bah[@]}" build --quiet -f Containerfile -t "$image" \
  --build-arg "TARGET=$target" --build-arg "VERSION=$version" \
  --build-arg "REVISION=$revision" \
  --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" . >/dev/null
echo "built $image in $((SECONDS - start)) s"
ok "buildah build (vfs) of $image"
current=$("${bah[@]}" images --quiet --no-trunc "$image")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  "${bah[@]}" rmi "$previous" >/dev/null 2>&1 || true
fi

inspect() { "${bah[@]}" inspect --type image --format "$1" "$image"; }
user=$(inspect '{{.OCIv1.Config.User}}')
# Each element in <>: ["/kanon"] is </kanon>, and ["/kanon", ""] would not be.
entrypoint=$(inspect '{{range .OCIv1.Config.Entrypoint}}<{{.}}>{{end}}')
cmd=$(inspect '{{range .OCIv1.Config.Cmd}}<{{.}}>{{end}}')
layers=$(inspect '{{len .OCIv1.RootFS.DiffIDs}}')
architecture=$(inspect '{{.OCIv1.Architecture}}')
echo "user: $user"
echo "entrypoint: $entrypoint"
echo "cmd: $cmd"
echo "layers: $layers"
echo "architecture: $architecture"
echo "labels:"
inspect '{{range $k, $v := .OCIv1.Config.Labels}}  {{$k}}={{$v}}{{"\n"}}{{end}}'
[ "$user" = "65532:65532" ] || fail "image user is '$user', expected 65532:65532"
ok "image user 65532:65532"
[ "$entrypoint" = '</kanon>' ] || fail "image entrypoint is $entrypoint, expected </kanon>"
[ "$cmd" = '<serve>' ] || fail "image command is $cmd, expected <serve>"
ok "image entrypoint [\"/kanon\"], command [\"serve\"]"
[ "$layers" -eq 1 ] || fail "image has $layers layers, expected 1"
ok "image has one layer"
for label in title description licenses version revision created; do
  [ -n "$(inspect "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$label\"}}")" ] ||
    fail "label org.opencontainers.image.$label is missing"
done
ok "labels org.opencontainers.image.{title,description,licenses,version,revision,created}"

# The layer's content, as a file listing of the image exported to an OCI archive (the layer
# compressed, as a registry would store it).
"${bah[@]}" push --quiet "$image" "oci-archive:$work/image.tar" >/dev/null
mkdir "$work/oci"
tar -xf "$work/image.tar" -C "$work/oci"
listing=
for blob in "$work"/oci/blobs/sha256/*; do
  # Configs and manifests are JSON; the layer is the one blob that tar can list.
  if entries=$(tar -tf "$blob" 2>/dev/null) && [ -n "$entries" ]; then
    listing+="$entries"$'\n'
    layer_size=$(stat -c %s "$blob")
  fi
done
echo "layer content:"
printf '%s' "$listing" | sed 's/^/  /'
files=$(printf '%s' "$listing" | sed -e 's#^\./##' -e 's#/$##' | { grep -v '^\.\?$' || true; } | sort -u)
[ "$files" = "kanon" ] || fail "the layer holds more than /kanon: $(echo "$files" | tr '\n' ' ')"
ok "the layer holds only /kanon"
sizes="layer ${layer_size:-?} bytes gzip-compressed (what a registry stores and a node pulls), \
$size bytes unpacked (the binary), OCI archive $(stat -c %s "$work/image.tar") bytes"
echo "image size: $sizes"

# The image's own file system: run what is in it, as its user, with nothing else around.
if $can_chroot; then
  container=$("${bah[@]}" from --quiet "$image")
  if mountpoint=$("${bah[@]}" mount "$container" 2>/dev/null); then
    cp -r examples "$mountpoint/examples"
    chmod -R a+rX "$mountpoint/examples"
    run_in_root "$mountpoint" "the image's file system (buildah mount, chroot)"
  else
    skip "running from the image's file system: buildah mount failed"
  fi
else
  skip "running from the image's file system: needs root and chroot"
fi
skip "running a container from the image: needs a container runtime (podman/docker), not used"

summary
