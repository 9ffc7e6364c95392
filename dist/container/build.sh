#!/usr/bin/env bash
# Builds the container image localhost/oi:VERSION with buildah from the release
# binary, then checks the image's own filesystem without a container runtime
# (these machines build images but cannot run containers): it mounts the image
# and, chrooted into it as the image's user, runs `oi --check` on the shipped
# configuration and forwards one connection on loopback through the image's oi.
# Usage: dist/container/build.sh [path/to/oi]     (default target/dist/release/oi,
# the profile-guided build dist/pgo-build.sh makes, as the package ships)
# Needs: buildah (Debian package), python3; root (buildah storage, chroot).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
oi=${1:-$top/target/dist/release/oi}
[ -x "$oi" ] || { echo "no binary at $oi: dist/pgo-build.sh first" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -n1)
image=localhost/oi:$version

work=$(mktemp -d)
ctr=
cleanup() {
    [ -n "$ctr" ] && { buildah umount "$ctr" >/dev/null 2>&1 || true; buildah rm "$ctr" >/dev/null 2>&1 || true; }
    [ -n "${echo_pid:-}" ] && kill "$echo_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# rootfs/: the binary, what ld.so loads for it, and the files a process
# expects to find (users, name service order).
root=$work/rootfs
install -D -m 755 "$oi" "$root/usr/sbin/oi"
ldd "$oi" | grep -o '/[^ ]*' | while read -r lib; do
    install -D -m 755 "$(readlink -f "$lib")" "$root$lib"
done
install -d -m 755 "$root/etc/oi" "$root/tmp"
install -m 644 "$here/rinetd.conf" "$root/etc/oi/rinetd.conf"
# The control socket's directory belongs to the image's user.
install -d -m 750 -o 65532 -g 65532 "$root/run/oi"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\noi:x:65532:65532:oi:/nonexistent:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\noi:x:65532:\n' > "$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
cp "$here/Containerfile" "$work/"

buildah bud --quiet --layers=false \
    --label "org.opencontainers.image.title=oi" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.description=rinetd-compatible TCP/UDP port forwarder" \
    -f "$work/Containerfile" -t "$image" "$work" >/dev/null

# What the image says about itself.
user=$(buildah inspect --format '{{.OCIv1.Config.User}}' "$image")
entry=$(buildah inspect --format '{{.OCIv1.Config.Entrypoint}}' "$image")
[ "$user" = "65532:65532" ] || { echo "image user is '$user', not 65532:65532" >&2; exit 1; }
[ "$entry" = "[/usr/sbin/oi]" ] || { echo "image entrypoint is '$entry'" >&2; exit 1; }

# Run the image's own oi in its own filesystem, as its own user.
ctr=$(buildah from "$image")
mnt=$(buildah mount "$ctr")
chroot --userspec=65532:65532 "$mnt" /usr/sbin/oi --check -c /etc/oi/rinetd.conf >/dev/null

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fwd_port=$(port)
# The backend binds port 0 and prints the port once it listens.
exec 3< <(exec python3 -c '
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.sendall(c.recv(64).upper()); c.close()
')
echo_pid=$!
read -r -t 20 echo_port <&3
printf '127.0.0.1 %s 127.0.0.1 %s\n' "$fwd_port" "$echo_port" > "$mnt/tmp/test.conf"
# oi's diagnostics on fd 4; it says "serving" once every listener is bound.
exec 4< <(exec chroot --userspec=65532:65532 "$mnt" /usr/sbin/oi -c /tmp/test.conf 2>&1)
oi_pid=$!
ready=
while read -r -t 20 line <&4; do
    echo "$line" >> "$work/oi.err"
    case $line in *" serving "*) ready=1; break ;; esac
done
[ -n "$ready" ] || { cat "$work/oi.err" >&2; echo "the image's oi did not start" >&2; exit 1; }
reply=$(python3 -c '
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c.sendall(b"through the image"); print(c.recv(64).decode())
' "$fwd_port") || true
kill "$oi_pid" 2>/dev/null || true
wait "$oi_pid" 2>/dev/null || true
[ "$reply" = "THROUGH THE IMAGE" ] || { cat "$work/oi.err" >&2; echo "no reply through the image's oi (got '$reply')" >&2; exit 1; }

size=$(du -sk "$mnt" | cut -f1)
echo "built $image: user $user, entrypoint $entry, root filesystem ${size} KiB; oi --check and a forwarded connection passed inside it"
