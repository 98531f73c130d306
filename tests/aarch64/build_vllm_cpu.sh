#!/usr/bin/env bash
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# OPT-IN, NOT RUN BY THE TESTS: build the vLLM CPU wheel for a Kunpeng 920 from the pinned vLLM sdist, in the
# arm64 Debian tree of arm64_rootfs.sh, under qemu-user emulation on an x86_64 host. Expect hours: emulated
# compilers run 10-20x slower than native ones. See docs/kunpeng-build.md.
#
#   sudo tests/aarch64/build_vllm_cpu.sh build   everything below, then pip wheel (resumable: steps done are kept)
#   sudo tests/aarch64/build_vllm_cpu.sh deps    only: tree, sdist, plan, apt and pip build dependencies
#   sudo tests/aarch64/build_vllm_cpu.sh probe   after deps: time the compile of one vLLM CPU kernel file
#   sudo tests/aarch64/build_vllm_cpu.sh shell   a shell in the prepared tree, with the plan's environment
#   sudo tests/aarch64/build_vllm_cpu.sh clean   unmount and delete the build tree
#
# The build environment (CFLAGS/CXXFLAGS, VLLM_TARGET_DEVICE, CMAKE_ARGS) is the build_plan of the numa fact that
# numa_facts collects from the fake Kunpeng 920 sysfs of the unit-test fixtures; MAX_JOBS is planned from this
# machine's own CPUs and memory, since this machine runs the compilers.
#
# Environment: VLLM_VERSION (default 0.11.0), ARM64_CACHE_DIR (default aarch64/ in
# the shared cache of lab/cache.sh), ARM64_BUILD_DIR
# (default $ARM64_CACHE_DIR/build-vllm-$VLLM_VERSION), FETCHCONTENT_SOURCE_DIR_ONEDNN and ACL_ROOT_DIR (local
# oneDNN / Arm Compute Library sources for hosts without GitHub access; vLLM reads them from 0.11.1 on).
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
repo=$(cd "$here/../.." && pwd)
VLLM_VERSION=${VLLM_VERSION:-0.11.0}
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
cache=${ARM64_CACHE_DIR:-$cache_dir/aarch64}
work=${ARM64_BUILD_DIR:-$cache/build-vllm-$VLLM_VERSION}
root=$work/root
src=/usr/src/vllm-$VLLM_VERSION
python=$repo/.venv/bin/python
CHROOT_PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export ARM64_CACHE_DIR=$cache

log() { printf '[%s +%5ds] %s\n' "$(date +%T)" "$SECONDS" "$*"; }
die() { echo "build_vllm_cpu.sh: $*" >&2; exit 1; }

umount_below() {
  awk -v d="$(readlink -f "$1")/" 'index($2 "/", d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
    umount -l "$mnt" || true
  done
}

in_chroot() {  # in_chroot [VAR=value ...] command ...
  local net=() var
  # The host's CA bundle (it may hold a TLS-inspecting proxy's CA) and proxy settings, for pip, git and CMake.
  if [[ -s $root/etc/ssl/host-ca.crt ]]; then
    net+=(SSL_CERT_FILE=/etc/ssl/host-ca.crt PIP_CERT=/etc/ssl/host-ca.crt GIT_SSL_CAINFO=/etc/ssl/host-ca.crt)
  fi
  for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n ${!var:-} ]] && net+=("$var=${!var}")
  done
  chroot "$root" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LC_ALL=C.UTF-8 "${net[@]}" "$@"
}

step_tree() {
  "$here/arm64_rootfs.sh" binfmt
  if [[ ! -e $work/.tree-done ]]; then
    local tarball
    tarball=$("$here/arm64_rootfs.sh" tarball)
    log "unpacking $tarball into $root"
    umount_below "$work" 2>/dev/null || true
    rm -rf --one-file-system "$root" && mkdir -p "$root"
    tar -xzf "$tarball" --numeric-owner -C "$root"
    touch "$work/.tree-done"
  fi
}

step_sdist() {
  local sdist=$cache/vllm-$VLLM_VERSION.tar.gz
  if [[ ! -s $sdist ]]; then
    log "downloading the vLLM $VLLM_VERSION sdist from PyPI"
    "$python" - "$VLLM_VERSION" "$sdist" <<'EOF'
import hashlib, re, shutil, sys, urllib.parse, urllib.request
version, dest = sys.argv[1:]
index = 'https://pypi.org/simple/vllm/'
page = urllib.request.urlopen(index, timeout=60).read().decode()
match = re.search(r'href="([^"]*/vllm-%s\.tar\.gz)#sha256=([0-9a-f]{64})"' % re.escape(version), page)
if not match:
    sys.exit('PyPI lists no vllm-%s.tar.gz' % version)
with urllib.request.urlopen(urllib.parse.urljoin(index, match.group(1)), timeout=300) as r, open(dest + '.partial', 'wb') as f:
    shutil.copyfileobj(r, f)
digest = hashlib.sha256(open(dest + '.partial', 'rb').read()).hexdigest()
if digest != match.group(2):
    sys.exit('sha256 %s of the download is not the %s PyPI publishes' % (digest, match.group(2)))
shutil.move(dest + '.partial', dest)
EOF
  fi
  if [[ ! -e $root$src/PKG-INFO ]]; then
    mkdir -p "$root/usr/src"
    tar -xzf "$sdist" -C "$root/usr/src" --no-same-owner
  fi
  grep -qx "Version: $VLLM_VERSION" "$root$src/PKG-INFO" || die "$src/PKG-INFO does not say Version: $VLLM_VERSION"
}

step_plan() {
  log "planning the build from the Kunpeng 920 facts"
  PYTHONPATH=$repo/collections "$python" - "$VLLM_VERSION" "$work" "$root$src" <<'EOF'
import json, pathlib, re, sys, tempfile
from ansible_collections.llmops.vllm.plugins.module_utils._build import build_plan
from ansible_collections.llmops.vllm.plugins.module_utils._numa import collect_numa
from ansible_collections.llmops.vllm.tests.unit.fixtures.topologies import KUNPENG920_8xA100, write_sysfs

version, work, tree = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
with tempfile.TemporaryDirectory() as tmp:
    kunpeng = collect_numa(str(write_sysfs(pathlib.Path(tmp) / 'kunpeng', KUNPENG920_8xA100)))
torch = re.search(r'^torch==([\w.]+); .*platform_machine == "aarch64"',
                  (tree / 'requirements' / 'cpu-build.txt').read_text(), re.MULTILINE).group(1)
memtotal_mib = int(re.search(r'MemTotal:\s*(\d+)', open('/proc/meminfo').read()).group(1)) // 1024
here = build_plan(collect_numa('/'), None, vllm_version=version, target_device='cpu', memory_mib=memtotal_mib)
plan = build_plan(kunpeng, None, vllm_version=version, target_device='cpu', torch_version=torch,
                  python_version='3.11', max_jobs=here['max_jobs'])
plan['max_jobs_reason'] = 'this build machine: ' + here['max_jobs_reason']
(work / 'plan.json').write_text(json.dumps(plan, indent=2, sort_keys=True) + '\n')
(work / 'plan.env').write_text(''.join('%s=%s\n' % item for item in sorted(plan['env'].items())))
(work / 'cpuinfo').write_text(KUNPENG920_8xA100['cpuinfo'])
print('cache key %s, torch %s, MAX_JOBS %s (%s)' % (plan['cache_key'], torch, plan['max_jobs'], plan['max_jobs_reason']))
for line in sorted(plan['env'].items()):
    print('  %s=%s' % line)
EOF
}

mount_tree() {
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  mountpoint -q "$root/sys" || mount -t sysfs -o ro sysfs "$root/sys"  # torch's cpuinfo reads it
  # qemu-user 7.2 shows the x86 host's /proc/cpuinfo; vLLM's CMake picks its ISA from /proc/cpuinfo, so show it
  # the Kunpeng 920 of the plan.
  mount --bind "$work/cpuinfo" "$root/proc/cpuinfo"
  mkdir -p "$root/dev/shm" && { mountpoint -q "$root/dev/shm" || mount -t tmpfs -o size=1g tmpfs "$root/dev/shm"; }
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  local ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
  [[ -s $ca ]] && cp "$ca" "$root/etc/ssl/host-ca.crt"
  trap 'umount_below "'"$root"'"' EXIT
}

step_deps() {
  if [[ ! -e $work/.apt-done ]]; then
    log "apt: python3-venv python3-dev libnuma-dev git ca-certificates (emulated dpkg, a few minutes)"
    in_chroot DEBIAN_FRONTEND=noninteractive apt-get update -q
    in_chroot DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      python3-venv python3-dev libnuma-dev git ca-certificates
    touch "$work/.apt-done"
  fi
  if [[ ! -e $work/.pip-done ]]; then
    log "pip: vLLM's build requirements (torch for aarch64 from PyPI; the PyTorch index is not used)"
    [[ -x $root/opt/venv/bin/python ]] || in_chroot python3 -m venv /opt/venv
    grep -v -- '--extra-index-url' "$root$src/requirements/cpu-build.txt" >"$root/tmp/build-requirements.txt"
    in_chroot pip install -q --disable-pip-version-check -r /tmp/build-requirements.txt
    touch "$work/.pip-done"
  fi
  log "build dependencies ready: $(in_chroot python -c 'import torch, platform; print("torch", torch.__version__, platform.machine())')"
}

check_sources() {
  [[ -n ${FETCHCONTENT_SOURCE_DIR_ONEDNN:-} ]] && return 0
  if ! in_chroot timeout 30 git ls-remote -q https://github.com/oneapi-src/oneDNN.git v3.9 >/dev/null 2>&1; then
    die "github.com is not reachable, and vLLM's CMake clones oneDNN from it (and, from 0.11.1 on aarch64, Arm Compute
Library): give local copies as FETCHCONTENT_SOURCE_DIR_ONEDNN and ACL_ROOT_DIR (paths inside $root; read by
vLLM >= 0.11.1), or build where GitHub is reachable."
  fi
}

step_build() {
  local env_args key
  mapfile -t env_args <"$work/plan.env"
  key=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["cache_key"])' "$work/plan.json")
  [[ -n ${FETCHCONTENT_SOURCE_DIR_ONEDNN:-} ]] && env_args+=("FETCHCONTENT_SOURCE_DIR_ONEDNN=$FETCHCONTENT_SOURCE_DIR_ONEDNN")
  [[ -n ${ACL_ROOT_DIR:-} ]] && env_args+=("ACL_ROOT_DIR=$ACL_ROOT_DIR")
  log "pip wheel --no-build-isolation of $src for $key; log: $work/build.log"
  in_chroot "${env_args[@]}" VERBOSE=1 pip wheel --no-build-isolation --no-deps -v -w "/wheelhouse/$key" "$src" \
    2>&1 | while IFS= read -r line; do printf '%s %s\n' "$(date +%T)" "$line"; done >"$work/build.log"
  mkdir -p "$cache/wheelhouse/$key"
  cp "$root/wheelhouse/$key"/vllm-*.whl "$cache/wheelhouse/$key/"
  cp "$work/plan.json" "$cache/wheelhouse/$key/plan.json"
  log "built: $(ls "$cache/wheelhouse/$key"/vllm-*.whl)"
}

step_probe() {
  # One translation unit of vLLM's CPU extension, compiled with the flags vLLM's CMake uses on this CPU.
  local env_args cxxflags march site
  mapfile -t env_args <"$work/plan.env"
  cxxflags=$(printf '%s\n' "${env_args[@]}" | sed -n 's/^CXXFLAGS=//p')
  march=$(sed -n 's/.*set(MARCH_FLAGS "\(-march=armv8.2-a+dotprod+fp16\)").*/\1/p' "$root$src/cmake/cpu_extension.cmake")
  site=$(in_chroot python -c 'import torch, os; print(os.path.dirname(torch.__file__))')
  log "probe: g++ $cxxflags $march -O2 -g csrc/cpu/activation.cpp (vLLM's RelWithDebInfo flags)"
  local start=$SECONDS
  # shellcheck disable=SC2086  # cxxflags holds several flags
  in_chroot g++ $cxxflags -O2 -g -DNDEBUG -std=gnu++17 -fPIC -fopenmp -DVLLM_CPU_EXTENSION "$march" \
    -DTORCH_EXTENSION_NAME=_C -DPy_LIMITED_API=3 -I"$src/csrc" -I"$site/include" \
    -I"$site/include/torch/csrc/api/include" -I/usr/include/python3.11 \
    -c "$src/csrc/cpu/activation.cpp" -o /tmp/activation.o
  log "probe: csrc/cpu/activation.cpp compiled in $((SECONDS - start)) s under emulation"
}

[[ $(id -u) == 0 ]] || die "run as root (binfmt_misc, chroot, mount)"
mkdir -p "$work"
case ${1:-} in
  build) step_tree; step_sdist; step_plan; mount_tree; step_deps; check_sources; step_build ;;
  deps) step_tree; step_sdist; step_plan; mount_tree; step_deps ;;
  probe) [[ -e $work/.pip-done ]] || die "run deps first"; mount_tree; step_probe ;;
  shell) mount_tree; mapfile -t env_args <"$work/plan.env"; in_chroot "${env_args[@]}" TERM="${TERM:-dumb}" bash --noprofile --norc ;;
  clean) umount_below "$work"; rm -rf --one-file-system "$work"; log "removed $work" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
