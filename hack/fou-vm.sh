#!/usr/bin/env bash
# fou-vm.sh - runs a command inside a throw-away qemu VM that boots Debian's stock kernel, for the
# tests that need kernel features a machine may lack (FoU, IPIP, ip6tnl, sit: modules of the stock
# kernel; this project's CI machine runs a kernel built without them and without module support).
# The VM sees the host's root filesystem over 9p, read-only, under a RAM overlay, so the host's own
# binaries (ip, nft, node, bash) run unchanged; the command runs as root, chrooted into that view,
# in the same working directory with the same environment. Used by test/netns/egress-fou-vm.test.ts.
#
# Usage: hack/fou-vm.sh [-v] [--rw DIR]... [--modules "m1 m2"] [--] COMMAND [ARG...]
#        hack/fou-vm.sh --ensure    set up whatever is missing (hack/setup.sh runs this), then exit
#        hack/fou-vm.sh --setup     redo the setup even when the cache is complete, then exit
#        hack/fou-vm.sh --status    exit 0 when a run needs no setup; else print why and exit 3
#   setup          apt-get installs the host packages below, downloads Debian's kernel package
#                  (the one linux-image-amd64 depends on; `apt-get download`, never installed on the
#                  host), unpacks it into the cache, runs depmod there and extracts an uncompressed
#                  vmlinux (qemu boots it through its PVH entry: no in-guest decompression, which
#                  costs ~5 s without KVM). About 10 s with a warm apt cache, ~440 MB on disk.
#   -v             print timings (boot to command start, command, total) and qemu warnings.
#   --rw DIR       share host directory DIR read-write at the same path in the VM (repeatable).
#                  Everything else is read-only from the host; writes elsewhere go to the RAM
#                  overlay and are discarded when the VM powers off.
#   --modules LIST extra kernel modules to modprobe at boot (space separated). Module
#                  auto-loading (request_module) also works, through busybox modprobe.
# stdout/stderr of COMMAND stream to this script's stdout/stderr (two emulated UARTs, raw mode);
# its stdin is /dev/null. The VM has no network interface. Exit status: COMMAND's, 124 on timeout,
# 125 when the VM or the setup failed (the guest console tail is then printed to stderr).
#
# Environment (all optional):
#   FOU_VM_CACHE    cache dir (default ${COIL_CACHE_DIR:-$XDG_CACHE_HOME/coil}/fou-vm, beside the
#                   control plane: outside the work tree, so a fresh clone finds it set up)
#   FOU_VM_KPKG     kernel package to fetch (default: what linux-image-amd64 depends on)
#   FOU_VM_MEM      guest RAM in MiB (default 2048)      FOU_VM_SMP   vCPUs (default 2)
#   FOU_VM_CPU      qemu -cpu model (default max under TCG, host under KVM)
#   FOU_VM_ACCEL    tcg | kvm | auto (default auto: kvm only if /dev/kvm is usable AND the CPU shows
#                   vmx/svm AND the host's KVM is not kvm_pvm, a paravirtual KVM that only runs
#                   guests built for it: a stock kernel hangs at boot there)
#   FOU_VM_TIMEOUT  seconds before the VM is killed (default 900) -> exit 124
#   FOU_VM_MODULES  modules loaded at boot (default "fou fou6 ipip ip6_tunnel sit veth"; fou has no
#                   module alias, so `ip fou add` fails unless it is loaded first)
#   FOU_VM_APPEND   extra kernel command-line arguments
#   FOU_VM_MACHINE  qemu -machine value (default q35; it boots ~1.5 s faster than pc)
#   FOU_VM_QEMU_OPTS extra qemu arguments (word-split)
#   FOU_VM_CONSOLE  if set, the guest console log (kernel + init messages) is copied to this file
# Needs root: for the setup (apt-get) and for the 9p export of / (qemu must read the whole tree).
# Host packages: qemu-system-x86 busybox-static cpio kmod xz-utils (hack/setup.sh installs them).
set -u -o pipefail

PROG=fou-vm
CACHE=${FOU_VM_CACHE:-${COIL_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/coil}/fou-vm}
MEM=${FOU_VM_MEM:-2048}
SMP=${FOU_VM_SMP:-2}
TIMEOUT=${FOU_VM_TIMEOUT:-900}
MODULES=${FOU_VM_MODULES:-fou fou6 ipip ip6_tunnel sit veth}
ACCEL=${FOU_VM_ACCEL:-auto}
# modules needed before the host filesystem can be mounted (closure resolved from modules.dep)
BOOT_MODULES="virtio_pci 9pnet_virtio 9p overlay"
PKGS="qemu-system-x86 busybox-static cpio kmod xz-utils"

die() { echo "$PROG: $*" >&2; exit 125; }

DO_SETUP=0 ENSURE=0 STATUS=0 VERBOSE=0 RW_DIRS=()
while [ $# -gt 0 ]; do
  case $1 in
    --setup) DO_SETUP=1; shift ;;
    --ensure) ENSURE=1; shift ;;
    --status) STATUS=1; shift ;;
    -v) VERBOSE=1; shift ;;
    --rw) [ $# -ge 2 ] || die "--rw needs a directory"; RW_DIRS+=("$(cd -- "$2" && pwd -P)") || die "no such dir: $2"; shift 2 ;;
    --modules) [ $# -ge 2 ] || die "--modules needs a list"; MODULES="$MODULES $2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || [ "$DO_SETUP" = 1 ] || [ "$ENSURE" = 1 ] || [ "$STATUS" = 1 ] || die "no command given (see --help)"

# ---------------------------------------------------------------------------------------------
# Guest /init (busybox sh). Reads /out/vm.conf written by the host side for each run.
read -r -d '' GUEST_INIT <<'INIT_EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
up() { cut -d' ' -f1 /proc/uptime; }
log() { echo "fou-vm-init: [$(up)] $*" > /dev/ttyS0; }
fail() { log "FATAL: $*"; echo 125 > /out/rc 2> /dev/null; sync; poweroff -f; }
log "init started"
for m in $(cat /mods.order); do insmod "/mods/$m.ko" 2> /dev/ttyS0 || log "insmod $m failed"; done
log "boot modules loaded"
mkdir -p /out /host /nr /up
O9="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "$O9,cache=none" fouvmout /out || fail "cannot mount output share"
. /out/vm.conf
mount -t 9p -o "$O9,cache=loose,ro" hostroot /host || fail "cannot mount host root"
mount -t tmpfs -o mode=755 tmpfs /up && mkdir -p /up/u /up/w
if ! mount -t overlay -o lowerdir=/host,upperdir=/up/u,workdir=/up/w overlay /nr; then
  log "overlay failed; host root is read-only, tmpfs on /tmp /var/tmp /root"
  mount --bind /host /nr
  for d in /tmp /var/tmp /root; do mount -t tmpfs tmpfs "/nr$d"; done
fi
# kernel modules of the guest kernel: for busybox modprobe here (also used by request_module)
# and for the host's kmod inside the chroot
KVER=$(uname -r)
mkdir -p "/lib/modules/$KVER" && mount --bind "/host$KMODDIR" "/lib/modules/$KVER"
ln -sf /bin/busybox /sbin/modprobe 2> /dev/null || { mkdir -p /sbin; ln -sf /bin/busybox /sbin/modprobe; }
echo /sbin/modprobe > /proc/sys/kernel/modprobe
log "root mounted"
for m in $MODULES; do modprobe "$m" 2> /dev/ttyS0 || log "modprobe $m failed"; done
log "modules loaded: $MODULES"
mount -t proc proc /nr/proc
mount -t sysfs sys /nr/sys
mount -t devtmpfs dev /nr/dev
mkdir -p /nr/dev/pts /nr/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /nr/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /nr/dev/shm
mount -t cgroup2 cgroup2 /nr/sys/fs/cgroup 2> /dev/null
mount -t bpf bpf /nr/sys/fs/bpf 2> /dev/null
mount -t tmpfs -o mode=755 tmpfs /nr/run
mkdir -p /nr/run/lock /nr/run/fou-vm "/nr/lib/modules/$KVER"
mount --bind /out /nr/run/fou-vm
mount --bind "/lib/modules/$KVER" "/nr/lib/modules/$KVER"
i=0
for d in $RW_DIRS; do
  mount -t 9p -o "$O9,cache=mmap" "rw$i" "/nr$d" || log "cannot mount rw share $d"
  i=$((i + 1))
done
hostname fou-vm
ip link set lo up
exec 3> /dev/ttyS1 4> /dev/ttyS2
stty -F /dev/ttyS1 raw -echo 115200; stty -F /dev/ttyS2 raw -echo 115200
echo "$(up)" > /out/t_cmd_start
log "FOU_VM_CMD_START"
chroot /nr "$SHELL_PATH" /run/fou-vm/run.sh < /dev/null >&3 2>&4
rc=$?
echo "$(up)" > /out/t_cmd_end
exec 3>&- 4>&-
echo "$rc" > /out/rc
sync
poweroff -f
INIT_EOF

# ---------------------------------------------------------------------------------------------
need_root() { [ "$(id -u)" = 0 ] || die "$* needs root"; }

have_tools() {
  command -v qemu-system-x86_64 > /dev/null && command -v cpio > /dev/null &&
    command -v depmod > /dev/null && command -v xz > /dev/null &&
    [ -x /bin/busybox ] && ! ldd /bin/busybox > /dev/null 2>&1
}

# load order of a module and its dependencies, from modules.dep (deps first)
mod_closure() { # moddir modname...
  local dir=$1; shift
  awk -v want="$*" '
    { sub(":", "", $1); n = $1; sub(".*/", "", n); sub(/\.ko(\..*)?$/, "", n); gsub("-", "_", n); path[n] = $1
      deps[n] = ""; for (i = 2; i <= NF; i++) { d = $i; sub(".*/", "", d); sub(/\.ko(\..*)?$/, "", d); gsub("-", "_", d); deps[n] = deps[n] " " d } }
    function visit(m,   a, k, c) { gsub("-", "_", m); if (m in seen) return; seen[m] = 1
      if (!(m in path)) { print "MISSING " m; return }
      c = split(deps[m], a, " "); for (k = c; k >= 1; k--) visit(a[k]); print m " " path[m] }
    END { c = split(want, w, " "); for (k = 1; k <= c; k++) visit(w[k]) }' "$dir/modules.dep"
}

build_initrd() { # -> sets INITRD
  local hash tmp
  hash=$( { printf '%s' "$GUEST_INIT"; echo "$BOOT_MODULES ${KREL:?}"; sha256sum /bin/busybox; } | sha256sum | cut -c1-16)
  INITRD="$CACHE/initrd-$hash.cpio"
  [ -s "$INITRD" ] && return 0
  tmp=$(mktemp -d "$CACHE/initrd.XXXXXX") || die "mktemp failed"
  mkdir -p "$tmp"/{bin,sbin,dev,proc,sys,mods,lib/modules}
  cp /bin/busybox "$tmp/bin/busybox"
  printf '%s\n' "$GUEST_INIT" > "$tmp/init"; chmod 755 "$tmp/init"
  local name path
  # shellcheck disable=SC2086 # word lists on purpose
  mod_closure "$KDIR/lib/modules/$KREL" $BOOT_MODULES | while read -r name path; do
    [ "$name" = MISSING ] && { echo "$PROG: boot module $path missing" >&2; continue; }
    case $path in
      *.ko) cp "$KDIR/lib/modules/$KREL/$path" "$tmp/mods/$name.ko" ;;
      *.ko.xz) xz -dc "$KDIR/lib/modules/$KREL/$path" > "$tmp/mods/$name.ko" ;;
      *.ko.zst) zstd -qdc "$KDIR/lib/modules/$KREL/$path" > "$tmp/mods/$name.ko" ;;
      *.ko.gz) gzip -dc "$KDIR/lib/modules/$KREL/$path" > "$tmp/mods/$name.ko" ;;
    esac
    echo "$name" >> "$tmp/mods.order"
  done
  [ -s "$tmp/mods.order" ] || die "could not resolve boot modules"
  [ "$(id -u)" = 0 ] && mknod -m 600 "$tmp/dev/console" c 5 1
  (cd "$tmp" && find . | cpio -o -H newc --quiet) > "$INITRD.tmp" && mv "$INITRD.tmp" "$INITRD"
  rm -rf "$tmp"
  local f; for f in "$CACHE"/initrd-*.cpio; do [ "$f" = "$INITRD" ] || rm -f "$f"; done
}

setup() {
  mkdir -p "$CACHE" || die "cannot create $CACHE"
  if [ "$DO_SETUP" = 1 ] || ! have_tools; then
    need_root "installing $PKGS"
    echo "$PROG: installing $PKGS" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq > /dev/null 2>&1
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $PKGS > /dev/null || die "apt-get install failed"
    have_tools || die "tools still missing after install"
  fi
  local pkg deb ver
  pkg=${FOU_VM_KPKG:-$(apt-cache depends linux-image-amd64 2> /dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
  [ -n "$pkg" ] || { apt-get update -qq > /dev/null 2>&1; pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); }
  [ -n "$pkg" ] || die "cannot resolve the linux-image-amd64 dependency"
  echo "$PROG: fetching kernel package $pkg into $CACHE" >&2
  rm -rf "$CACHE/dl" && mkdir -p "$CACHE/dl" && chmod 755 "$CACHE/dl"
  (cd "$CACHE/dl" && apt-get download "$pkg" > /dev/null 2>&1) || die "apt-get download $pkg failed"
  deb=$(ls "$CACHE"/dl/*.deb | head -1)
  ver=$(dpkg-deb -f "$deb" Version)
  rm -rf "$CACHE/root.new" && mkdir -p "$CACHE/root.new"
  dpkg-deb -x "$deb" "$CACHE/root.new" || die "dpkg-deb -x failed"
  local krel img off
  krel=$(ls "$CACHE/root.new/lib/modules" | head -1)
  img=$(ls "$CACHE"/root.new/boot/vmlinuz-* | head -1)
  depmod -b "$CACHE/root.new" "$krel" || die "depmod failed"
  # uncompressed ELF vmlinux: qemu boots it directly via its PVH entry, skipping the in-guest xz
  # decompression, which costs ~5 s under TCG.
  off=$(LC_ALL=C grep -aboP '\xfd\x37\x7a\x58\x5a\x00' "$img" | head -1 | cut -d: -f1)
  if [ -n "$off" ] && xz -dc --single-stream < <(tail -c +$((off + 1)) "$img" 2> /dev/null) > "$CACHE/root.new/vmlinux" 2> /dev/null &&
     [ "$(head -c 4 "$CACHE/root.new/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ]; then :; else
    rm -f "$CACHE/root.new/vmlinux"; echo "$PROG: no vmlinux extracted, will boot the bzImage (slower)" >&2
  fi
  rm -rf "$CACHE/root" && mv "$CACHE/root.new" "$CACHE/root"
  rm -rf "$CACHE/dl"
  printf 'KPKG=%q\nKVERSION=%q\nKREL=%q\n' "$pkg" "$ver" "$krel" > "$CACHE/kernel.env"
  echo "$PROG: kernel $pkg $ver ($krel) ready" >&2
}

# ---------------------------------------------------------------------------------------------
# why a run would have to set up first; empty when it would not
not_ready() {
  local setup="run hack/fou-vm.sh --ensure, which hack/setup.sh runs"
  if ! have_tools; then echo "the VM tools are not installed: qemu-system-x86 busybox-static cpio kmod xz-utils ($setup)"
  elif [ ! -s "$CACHE/kernel.env" ]; then echo "no VM kernel in $CACHE ($setup)"
  elif [ "$(id -u)" != 0 ]; then echo "the VM needs root (qemu exports / over 9p)"
  fi
}
if [ "$STATUS" = 1 ]; then
  why=$(not_ready)
  [ -z "$why" ] && exit 0
  echo "$why"; exit 3
fi

mkdir -p "$CACHE" || die "cannot create $CACHE"
exec 9> "${CACHE%/}.lock" || die "cannot lock $CACHE"
flock 9
if [ "$DO_SETUP" = 1 ] || [ ! -s "$CACHE/kernel.env" ] || ! have_tools; then setup
elif [ "$ENSURE" = 1 ]; then echo "$PROG: kernel cached in $CACHE" >&2
fi
# shellcheck disable=SC1091
. "$CACHE/kernel.env"
KDIR=$CACHE/root
build_initrd
flock -u 9; exec 9>&-
[ $# -gt 0 ] || exit 0

KERNEL=$KDIR/vmlinux
[ -s "$KERNEL" ] || KERNEL=$(ls "$KDIR"/boot/vmlinuz-* | head -1)
if [ "$ACCEL" = auto ]; then
  ACCEL=tcg
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo && [ ! -d /sys/module/kvm_pvm ]; then ACCEL=kvm; fi
fi
if [ "$ACCEL" = kvm ]; then CPU=${FOU_VM_CPU:-host}; else CPU=${FOU_VM_CPU:-max}; fi

T0=$(date +%s.%N)
RUN=$(mktemp -d "${TMPDIR:-/tmp}/fou-vm.XXXXXX") || die "mktemp failed"
case $RUN$CACHE in *,*) rm -rf "$RUN"; die "TMPDIR and FOU_VM_CACHE must not contain commas (qemu option syntax)" ;; esac
QPID='' PIDS=()
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2> /dev/null && wait "$QPID" 2> /dev/null
  local p; for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null; wait "$p" 2> /dev/null; done
  rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mkdir "$RUN/out"
{
  printf 'KMODDIR=%q\n' "$KDIR/lib/modules/$KREL"
  printf 'MODULES=%q\n' "$MODULES"
  printf 'RW_DIRS=%q\n' "${RW_DIRS[*]:-}"
  printf 'SHELL_PATH=%q\n' "${BASH:-/bin/bash}"
} > "$RUN/out/vm.conf"
{
  echo "# generated by $PROG"
  for v in $(compgen -e); do
    case $v in PWD|OLDPWD|SHLVL|_|BASHOPTS|SHELLOPTS|BASH_*) continue ;; esac
    printf 'export %s=%q\n' "$v" "${!v}"
  done
  printf 'cd -- %q 2> /dev/null || { echo "%s: cannot cd to %q in the VM, running in /" >&2; cd /; }\n' "$PWD" "$PROG" "$PWD"
  printf 'exec'; printf ' %q' "$@"; printf '\n'
} > "$RUN/out/run.sh"

VFS=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
     -virtfs "local,path=$RUN/out,mount_tag=fouvmout,security_model=none,multidevs=remap")
i=0
for d in "${RW_DIRS[@]}"; do
  case $d in *,* | *" "* | *"	"*) die "--rw path must not contain commas or blanks: $d" ;; esac
  VFS+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap"); i=$((i + 1))
done

mkfifo "$RUN/so" "$RUN/se" "$RUN/con"
cat "$RUN/so" & PIDS+=($!)
cat "$RUN/se" >&2 & PIDS+=($!)
while IFS= read -r l || [ -n "$l" ]; do
  printf '%s\n' "$l" >> "$RUN/console.log"
  case $l in *FOU_VM_CMD_START*) date +%s.%N > "$RUN/t_start" ;; esac
done < "$RUN/con" & PIDS+=($!)

APPEND="console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off rodata=off tsc=reliable no_timer_check audit=0 random.trust_cpu=on cryptomgr.notests ${FOU_VM_APPEND:-}"
# shellcheck disable=SC2086 # FOU_VM_QEMU_OPTS is a word list
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
  -machine "${FOU_VM_MACHINE:-q35}" -accel "$ACCEL" -cpu "$CPU" -smp "$SMP" -m "$MEM" -nic none -monitor none \
  -kernel "$KERNEL" -initrd "$INITRD" -append "$APPEND" \
  -serial "file:$RUN/con" -serial "file:$RUN/so" -serial "file:$RUN/se" \
  "${VFS[@]}" ${FOU_VM_QEMU_OPTS:-} < /dev/null 2> "$RUN/qemu.err" &
QPID=$!
wait "$QPID"; QRC=$?; QPID=''
# release readers still blocked in open() (qemu never opened the FIFO), then let them drain
for f in so se con; do : <> "$RUN/$f"; done
for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null; done; PIDS=()
T1=$(date +%s.%N)

if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
  echo "$PROG: timed out after ${TIMEOUT}s; last console lines:" >&2; tail -n 30 "$RUN/console.log" >&2; exit 124
fi
if [ ! -s "$RUN/out/rc" ]; then
  [ -n "${FOU_VM_CONSOLE:-}" ] && cp "$RUN/console.log" "$FOU_VM_CONSOLE"
  echo "$PROG: VM failed (qemu rc $QRC); qemu stderr and console:" >&2
  cat "$RUN/qemu.err" >&2; tail -n 60 "$RUN/console.log" >&2; exit 125
fi
RC=$(cat "$RUN/out/rc")
[ -n "${FOU_VM_CONSOLE:-}" ] && cp "$RUN/console.log" "$FOU_VM_CONSOLE"
grep -E 'fou-vm-init: .*(fail|FATAL)' "$RUN/console.log" >&2
if [ "$VERBOSE" = 1 ]; then
  [ -s "$RUN/qemu.err" ] && sed "s/^/$PROG: qemu: /" "$RUN/qemu.err" >&2
  ts=$(cat "$RUN/t_start" 2> /dev/null || echo "$T1")
  echo "$PROG: kernel $KPKG $KVERSION, accel $ACCEL, cpu $CPU, smp $SMP, mem ${MEM}M" >&2
  awk -v t0="$T0" -v ts="$ts" -v t1="$T1" -v gs="$(cat "$RUN/out/t_cmd_start")" -v ge="$(cat "$RUN/out/t_cmd_end")" -v rc="$RC" -v p="$PROG" 'BEGIN {
    printf "%s: boot to command start %.2f s (guest uptime %.2f s); command %.2f s (guest clock); total %.2f s; rc %s\n", p, ts - t0, gs, ge - gs, t1 - t0, rc }' >&2
fi
exit "$RC"
