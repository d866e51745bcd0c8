#!/usr/bin/env bash
# bench/across_hosts_rsh.sh — the "ssh" of Open MPI's mpirun in bench/across_hosts.sh: starts the
# remote command inside the network namespace of a test host instead of logging in anywhere.
#
#   mpirun --mca plm_rsh_agent bench/across_hosts_rsh.sh ...   (AH_TAG set by across_hosts.sh)
#
# mpirun calls it as `AGENT [OPTIONS] HOST COMMAND...`, HOST being a test host's address
# 198.18.0.(10+k) (tests/multihost/mh_lib.sh); it runs COMMAND (a shell string, as ssh would hand
# it to the remote shell) in namespace pmh-$AH_TAG-h$k, in a UTS namespace of its own whose host
# name is ah-h$k, so Open MPI sees as many nodes as there are test hosts.
set -euo pipefail
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # options meant for ssh
host=${1:?usage: across_hosts_rsh.sh HOST COMMAND...}
shift
case $host in
  198.18.0.*) k=$((${host##*.} - 10)) ;;
  *) echo "across_hosts_rsh.sh: $host is not a test host (198.18.0.10+k)" >&2; exit 255 ;;
esac
ns="pmh-${AH_TAG:?AH_TAG is not set}-h$k"
exec ip netns exec "$ns" unshare --uts sh -c "hostname ah-h$k; $*"
