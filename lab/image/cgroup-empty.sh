#!/usr/bin/env bash
# Lab containers only: tells systemd when a service's cgroup has emptied, as the cgroup v1 release agent does on a
# host. In a container on a cgroup v1 host that agent is the host's, so systemd here never hears it; a unit whose
# last process dies after its main process (vLLM's multiprocessing resource tracker, say) then waits in
# final-sigkill for the whole TimeoutStopSec, and a restart takes a minute longer than it should.
# Each service cgroup that goes from holding processes to holding none is reported once, through systemd's own
# systemd-cgroups-agent; systemd checks the cgroup itself before it acts on it. The unit runs this only where the
# name=systemd hierarchy exists (cgroup v1): on cgroup v2 the kernel tells systemd itself.
set -u
shopt -s nullglob
hierarchy=/sys/fs/cgroup/systemd
root=$(sed -n 's/^[0-9]*:name=systemd:\(.*\)\/init\.scope$/\1/p' /proc/1/cgroup)
declare -A held
while sleep 0.5; do
  for dir in "$hierarchy$root"/system.slice/*.service; do
    if read -r _ <"$dir/cgroup.procs" 2>/dev/null; then
      held[$dir]=1
    elif [[ -n ${held[$dir]:-} ]]; then
      unset "held[$dir]"
      /usr/lib/systemd/systemd-cgroups-agent "${dir#"$hierarchy"}"
    fi
  done
done
