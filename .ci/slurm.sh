#!/usr/bin/env bash
# CI helper: a real single-node Slurm cluster on this machine, for the job-array tests.
#
#   bash .ci/slurm.sh up        install (if missing) + configure + start munged, slurmctld, slurmd;
#                               waits until the node is idle. Idempotent.
#   bash .ci/slurm.sh down      cancel all jobs, stop slurmd, slurmctld and munged. Idempotent,
#                               never fails when nothing is running.
#   bash .ci/slurm.sh selftest  (after up) a 4-element job array; one element is killed mid-run
#                               and requeued; waits until all four elements have written output.
#   bash .ci/slurm.sh status    sinfo + squeue, for debugging.
#
# Written for Debian 12 (bookworm, Slurm 22.05, munge 0.5.15), run as root, *without* systemd
# (CI containers / microVMs: PID 1 is not an init system, nothing sets up /run/munge or delegates
# cgroups). Therefore: daemons are started by hand, process tracking is proctrack/linuxproc (plain
# /proc, no cgroups), TaskPlugin=task/none (no binding, no memory enforcement: --mem is
# bookkeeping only), and there is no accounting database (sacct says "Slurm accounting storage is
# disabled"; use squeue -t all / scontrol show job, which keep finished jobs for MinJobAge=600 s).
#
# Harness notes (verified by `selftest`):
#  * sbatch's default --export=ALL hands the submitter's whole environment (PATH, custom vars) to
#    the job, captured at submission (a requeued run gets the same one); the job runs in the
#    submitter's working directory. --export=NONE drops custom variables.
#  * Kill one array element mid-run and requeue it: `scontrol requeue JOBID_I` on the RUNNING
#    element (kill + requeue in one), or `scancel JOBID_I` then `scontrol requeue JOBID_I` (a
#    CANCELLED, COMPLETED or FAILED element can be requeued; a PENDING element that was cancelled
#    before it ever started has no job record: "Invalid job id specified", resubmit it instead).
#    The requeued element is PENDING, Reason=BeginTime for cred_expire (10 s here, 120 s by
#    default); `scontrol update jobid=JOBID_I starttime=now` lifts the hold. The rerun has
#    SLURM_RESTART_COUNT=1 (unset, not 0, on a first run) and truncates its --output file
#    (--open-mode=append keeps both runs' output). `scontrol requeue JOBID` requeues every element.
#  * Use SLURM_ARRAY_JOB_ID + SLURM_ARRAY_TASK_ID to identify an element: SLURM_JOB_ID differs
#    per element (one of them, the last to start, reuses the array's own id).
#
# Environment knobs (all optional):
#   SLURM_CI_CLUSTER   ClusterName                          (default: engram-ci)
#   SLURM_CI_NODE      node name                            (default: hostname -s)
#   SLURM_CI_HEADROOM  MiB of RAM kept out of RealMemory    (default: max(1024, 10% of total))
#   SLURM_CI_TIMEOUT   seconds `up` waits for an idle node  (default: 30)
set -euo pipefail

CLUSTER=${SLURM_CI_CLUSTER:-engram-ci}
NODE=${SLURM_CI_NODE:-$(hostname -s)}
UP_TIMEOUT=${SLURM_CI_TIMEOUT:-30}

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
LOG_DIR=/var/log/slurm
CTLD_LOG=$LOG_DIR/slurmctld.log
SLURMD_LOG=$LOG_DIR/slurmd.log
STATE_DIR=/var/spool/slurmctld        # StateSaveLocation (slurmctld's job/node state)
SPOOL_DIR=/var/spool/slurmd           # SlurmdSpoolDir (batch scripts, step sockets)
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_KEY=/etc/munge/munge.key
MUNGE_RUN=/run/munge                  # munged's socket + pid file; tmpfs, so it vanishes on reboot
MUNGE_PID=$MUNGE_RUN/munged.pid
SELFTEST_DIR=/tmp/slurm-selftest

# ---------------------------------------------------------------------------------------------
# helpers

# Millisecond clock, for the timings printed after each step.
now_ms() { date +%s%3N; }
T_STEP=0
step() { echo "== slurm: $1"; T_STEP=$(now_ms); }
done_step() { local d=$(( $(now_ms) - T_STEP )); printf '   (%d.%03d s)\n' $((d / 1000)) $((d % 1000)); }

# On failure: say what failed and show the daemons' logs, which is where the real reason is.
die() {
  echo "slurm.sh: ERROR: $*" >&2
  for f in "$CTLD_LOG" "$SLURMD_LOG" /var/log/munge/munged.log; do
    if [ -f "$f" ]; then echo "---- last 30 lines of $f" >&2; tail -n 30 "$f" >&2; fi
  done
  exit 1
}

# Is process $1 alive (not a zombie) and really program $2 (guards against pid reuse)?
proc_alive() {
  local pid=$1 name=$2 state
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
# The pid in pid file $1 (empty if none).
read_pid() { cat "$1" 2>/dev/null || true; }
# Is the process named in pid file $1 alive and program $2?
pid_alive() { proc_alive "$(read_pid "$1")" "$2"; }

# Stop process $1 (program $2): TERM unless $4=nosignal, wait up to $3 s, then KILL.
# Waits on the pid itself, not on the pid file: the daemons delete their pid file early on exit.
stop_pid() {
  local pid=$1 name=$2 wait_s=${3:-10} signal=${4:-TERM} i
  proc_alive "$pid" "$name" || return 0
  [ "$signal" = nosignal ] || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < wait_s * 10; i++)); do
    proc_alive "$pid" "$name" || return 0
    sleep 0.1
  done
  echo "   $name (pid $pid) still running after ${wait_s}s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do proc_alive "$pid" "$name" || return 0; sleep 0.1; done
  echo "   WARNING: $name (pid $pid) survived SIGKILL"
}
stop_pidfile() {
  stop_pid "$(read_pid "$1")" "$2" "${3:-10}"
  rm -f "$1"
}

# A daemon writes its pid file shortly after forking into the background: wait up to 10 s.
wait_pidfile() {
  local i
  for ((i = 0; i < 100; i++)); do
    pid_alive "$1" "$2" && return 0
    sleep 0.1
  done
  die "$2 did not come up (no live pid in $1)"
}

# Bounded wrappers: a Slurm client blocks up to MessageTimeout per try when the controller is gone.
sc() { timeout 20 "$@"; }
ctld_responds() { timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }

# ---------------------------------------------------------------------------------------------
# up

install_packages() {
  step "install slurm-wlm + munge (only if missing)"
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
     && command -v sbatch >/dev/null && command -v munged >/dev/null; then
    echo "   already installed: $(slurmctld -V), munge $(dpkg-query -W -f='${Version}' munge 2>/dev/null)"
  else
    # The packages ship init.d scripts that would start the daemons with the packaged defaults
    # (no slurm.conf yet): forbid service starts during the install via policy-rc.d, exactly as
    # Docker images do, and remove it afterwards if we created it.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    local created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
      chmod 0755 /usr/sbin/policy-rc.d
      created_policy=1
    fi
    # --no-install-recommends: 9 packages instead of ~45 (the recommends are HDF5/IPMI/ROCm/...
    # profiling plugins that this cluster does not use).
    local rc=0
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null || rc=$?
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    [ "$rc" = 0 ] || die "apt-get install slurm-wlm munge failed (exit $rc)"
    echo "   installed: $(slurmctld -V), munge $(dpkg-query -W -f='${Version}' munge)"
  fi
  done_step
}

start_munge() {
  step "munge: key + munged"
  # Directories the munge package normally gets from systemd-tmpfiles / its init script. /run is
  # a tmpfs, so /run/munge is missing after every reboot or in a fresh container.
  install -d -o munge -g munge -m 0755 "$MUNGE_RUN"
  install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
  install -d -o munge -g munge -m 0711 /var/lib/munge
  # The key: the package's postinst usually creates one; create it if absent. munged refuses
  # a key that is readable by others or not owned by the munge user.
  if [ ! -s "$MUNGE_KEY" ]; then
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$MUNGE_KEY"
    else
      dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
    fi
    echo "   created $MUNGE_KEY"
  fi
  chown munge:munge "$MUNGE_KEY"
  chmod 0400 "$MUNGE_KEY"
  if pid_alive "$MUNGE_PID" munged; then
    echo "   munged already running (pid $(cat "$MUNGE_PID"))"
  else
    rm -f "$MUNGE_PID"
    # munged daemonizes itself; run it as the munge user (it refuses to run as root by default).
    runuser -u munge -- /usr/sbin/munged || die "munged did not start"
    wait_pidfile "$MUNGE_PID" munged
    echo "   started munged (pid $(cat "$MUNGE_PID"))"
  fi
  # A credential round trip proves the socket, the key and the daemon all work.
  local i
  for ((i = 0; i < 50; i++)); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  munge -n | unmunge >/dev/null || die "munge credential round trip failed"
  echo "   munge -n | unmunge: OK"
  done_step
}

write_config() {
  step "write $CONF"
  local cpus mem_total headroom real_mem
  cpus=$(nproc)
  mem_total=$(free -m | awk '/^Mem:/ {print $2}')
  headroom=${SLURM_CI_HEADROOM:-$(( mem_total / 10 > 1024 ? mem_total / 10 : 1024 ))}
  real_mem=$(( mem_total - headroom ))
  # Topology: take slurmd's own view of the hardware (slurmd -C) so the node never registers with
  # less than configured (which would DRAIN it: "Low socket*core*thread count").
  local hw sockets cores threads
  hw=$(slurmd -C 2>/dev/null | head -n 1 || true)
  sockets=$(sed -n 's/.*SocketsPerBoard=\([0-9]*\).*/\1/p' <<<"$hw")
  cores=$(sed -n 's/.*CoresPerSocket=\([0-9]*\).*/\1/p' <<<"$hw")
  threads=$(sed -n 's/.*ThreadsPerCore=\([0-9]*\).*/\1/p' <<<"$hw")
  local topo=""
  if [ -n "$sockets" ] && [ -n "$cores" ] && [ -n "$threads" ] \
     && [ $(( sockets * cores * threads )) -eq "$cpus" ]; then
    topo="SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads"
  fi
  # CR_Core_Memory allocates whole cores: with ThreadsPerCore=2 a 1-CPU job would take 2 CPUs.
  # On hyperthreaded machines use CR_CPU_Memory so every CPU is schedulable on its own.
  local cr=CR_Core_Memory
  if [ -n "$threads" ] && [ "$threads" -gt 1 ]; then cr=CR_CPU_Memory; fi

  install -d -m 0755 "$CONF_DIR" "$LOG_DIR"
  install -d -m 0755 "$STATE_DIR" "$SPOOL_DIR"
  local tmp
  tmp=$(mktemp)
  # SlurmctldHost / NodeAddr carry an explicit 127.0.0.1, so nothing depends on the hostname
  # resolving (it does in /etc/hosts here, but not in every container).
  cat > "$tmp" <<EOF
# Generated by .ci/slurm.sh -- single-node CI cluster. Do not edit; rerun 'slurm.sh up'.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire (default 120 s) is also how long a requeued job is held (Reason=BeginTime) before it
# may start again: 120 s per requeue is too slow for tests. Job launches here take milliseconds.
AuthInfo=cred_expire=10
CredType=cred/munge
MpiDefault=none
# No systemd / cgroup delegation here: track job processes through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=$cr
SchedulerType=sched/backfill
# Fast scheduling for tests: main loop and backfill every few seconds (defaults 60 s / 30 s).
SchedulerParameters=sched_interval=5,bf_interval=5
# A node that was DOWN comes back by itself when its slurmd registers with a valid config.
ReturnToService=2
# Batch jobs may be requeued (scontrol requeue; node failure).
JobRequeue=1
# Finished jobs stay visible to squeue/scontrol for 10 min (there is no sacct: no accounting).
MinJobAge=600
KillWait=5
# No accounting database: sacct does not work (it says so); squeue/scontrol do.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
# A job without --mem gets its share per CPU (without this it would get the whole node's
# memory under CR_*_Memory, and jobs would run one at a time).
DefMemPerCPU=$(( real_mem / cpus ))
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus $topo RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  CONFIG_CHANGED=0
  if ! cmp -s "$tmp" "$CONF"; then
    mv "$tmp" "$CONF"
    chmod 0644 "$CONF"
    CONFIG_CHANGED=1
    echo "   wrote $CONF (node $NODE: CPUs=$cpus ${topo:+$topo }RealMemory=$real_mem of ${mem_total} MiB, $cr)"
  else
    rm -f "$tmp"
    echo "   $CONF unchanged"
  fi
  # proctrack/linuxproc + task/none + jobacct_gather/none load no cgroup plugin: no cgroup.conf.
  done_step
}

start_slurm() {
  step "start slurmctld + slurmd"
  if [ "$CONFIG_CHANGED" = 1 ] && { pid_alive "$CTLD_PID" slurmctld || pid_alive "$SLURMD_PID" slurmd; }; then
    echo "   config changed while running: restarting the Slurm daemons"
    stop_slurm_daemons
  fi
  if pid_alive "$CTLD_PID" slurmctld; then
    echo "   slurmctld already running (pid $(cat "$CTLD_PID"))"
  else
    rm -f "$CTLD_PID"
    # -c: start from a clean state (no jobs or node states left over from an earlier run).
    # Without -D it daemonizes once its listening socket is up.
    slurmctld -c || die "slurmctld did not start"
    wait_pidfile "$CTLD_PID" slurmctld
    echo "   started slurmctld (pid $(cat "$CTLD_PID"))"
  fi
  if pid_alive "$SLURMD_PID" slurmd; then
    echo "   slurmd already running (pid $(cat "$SLURMD_PID"))"
  else
    rm -f "$SLURMD_PID"
    # -N: register as $NODE whatever `hostname -s` says.
    slurmd -N "$NODE" || die "slurmd did not start"
    wait_pidfile "$SLURMD_PID" slurmd
    echo "   started slurmd (pid $(cat "$SLURMD_PID"))"
  fi
  done_step
}

wait_idle() {
  step "wait (max ${UP_TIMEOUT}s) until node $NODE is idle"
  local t0 state="" resumed=0
  t0=$(date +%s)
  while :; do
    state=$(timeout 10 sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -n 1 || true)
    case "$state" in
      idle|mixed|allocated|completing) break ;;
      down|drained|draining|drain)          # down without '*': slurmd answers, the state is stale
        if [ "$resumed" = 0 ]; then
          echo "   node is $state: scontrol update nodename=$NODE state=resume"
          timeout 10 scontrol update nodename="$NODE" state=resume || true
          resumed=1
        fi ;;
    esac
    if [ $(( $(date +%s) - t0 )) -ge "$UP_TIMEOUT" ]; then
      timeout 10 sinfo -N -l >&2 || true
      timeout 10 scontrol show node "$NODE" >&2 || true
      die "node $NODE not idle after ${UP_TIMEOUT}s (state: '${state:-no answer}')"
    fi
    sleep 0.5
  done
  echo "   node $NODE is $state"
  timeout 10 sinfo
  done_step
}

cmd_up() {
  local t0
  t0=$(now_ms)
  install_packages
  start_munge
  write_config
  start_slurm
  wait_idle
  local d=$(( $(now_ms) - t0 ))
  printf '== slurm: up in %d.%03d s\n' $((d / 1000)) $((d % 1000))
}

# ---------------------------------------------------------------------------------------------
# down

stop_slurm_daemons() {
  # scontrol shutdown stops slurmctld and tells every slurmd to exit; the pids (read before, as
  # the daemons remove their pid files while exiting) catch leftovers: TERM, then KILL.
  local ctld_pid slurmd_pid
  ctld_pid=$(read_pid "$CTLD_PID")
  slurmd_pid=$(read_pid "$SLURMD_PID")
  if command -v scontrol >/dev/null && proc_alive "$ctld_pid" slurmctld && ctld_responds; then
    timeout 15 scontrol shutdown >/dev/null 2>&1 || true
    stop_pid "$slurmd_pid" slurmd 10 nosignal
    stop_pid "$ctld_pid" slurmctld 10 nosignal
  fi
  stop_pid "$slurmd_pid" slurmd 10
  stop_pid "$ctld_pid" slurmctld 10
  rm -f "$SLURMD_PID" "$CTLD_PID"
}

cmd_down() {
  step "down"
  if command -v scontrol >/dev/null && pid_alive "$CTLD_PID" slurmctld && ctld_responds; then
    # Cancel every job first: slurmstepd and the job's processes outlive slurmd otherwise.
    local jobs i
    jobs=$(timeout 10 squeue -h -o '%A' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      echo "   scancel $jobs"
      # shellcheck disable=SC2086
      timeout 15 scancel $jobs 2>/dev/null || true
      for ((i = 0; i < 30; i++)); do   # up to 15 s for the steps to exit
        [ -z "$(timeout 10 squeue -h -t running,completing -o '%A' 2>/dev/null || true)" ] && break
        sleep 0.5
      done
    fi
  fi
  stop_slurm_daemons
  stop_pidfile "$MUNGE_PID" munged 10
  echo "   slurmd, slurmctld, munged stopped"
  done_step
}

# ---------------------------------------------------------------------------------------------
# selftest: the job-array operations the engram tests rely on

cmd_selftest() {
  command -v sbatch >/dev/null || die "Slurm is not installed: run 'slurm.sh up' first"
  ctld_responds || die "slurmctld does not answer: run 'slurm.sh up' first"
  local t0
  t0=$(now_ms)
  rm -rf "$SELFTEST_DIR"
  mkdir -p "$SELFTEST_DIR"
  cd "$SELFTEST_DIR"

  step "submit a 4-element array (sbatch --array=0-3 --requeue)"
  # The element's script records what reaches the job: its index, restart count, the
  # submitter's environment (SELFTEST_MARKER, PATH) and the working directory.
  # First run of elements 2 and 3 sleeps long enough to be killed mid-run; reruns are quick.
  export SELFTEST_MARKER="from-the-submitter"
  local script=$SELFTEST_DIR/element.sh
  cat > "$script" <<'EOF'
#!/bin/bash
echo "task=$SLURM_ARRAY_TASK_ID job=$SLURM_JOB_ID array_job=$SLURM_ARRAY_JOB_ID restarts=${SLURM_RESTART_COUNT:-0}"
echo "marker=${SELFTEST_MARKER:-unset} cwd=$PWD"
echo "path=$PATH"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && [ "$SLURM_ARRAY_TASK_ID" -ge 2 ]; then sleep 30; else sleep 2; fi
echo "done task=$SLURM_ARRAY_TASK_ID"
EOF
  chmod +x "$script"
  local jid
  jid=$(sc sbatch --parsable --array=0-3 --requeue --cpus-per-task=1 --mem=100M \
          --output="$SELFTEST_DIR/%A_%a.out" "$script") || die "sbatch failed"
  jid=${jid%%;*}
  echo "   job array $jid"
  done_step

  # Wait (bounded) until array element $1 is in state $2 (squeue's %T).
  wait_state() {
    local el=$1 want=$2 limit=${3:-60} i st=""
    for ((i = 0; i < limit * 2; i++)); do
      st=$(timeout 10 squeue -h -t all -j "${jid}_$el" -o '%T' 2>/dev/null | head -n 1 || true)
      [ "$st" = "$want" ] && return 0
      sleep 0.5
    done
    die "element ${jid}_$el not $want after ${limit}s (is: '${st}')"
  }
  show() { timeout 10 squeue -t all -j "$jid" -o '%.12i %.10T %.10r %.8M %S' | sed 's/^/      /' || true; }

  # A requeued job is held for AuthInfo's cred_expire (10 s in this slurm.conf; Slurm's default
  # is 120 s) with Reason=BeginTime. `scontrol update jobid=X starttime=now` lifts the hold.
  step "element 2: kill it mid-run with scancel, then scontrol requeue the CANCELLED element"
  wait_state 2 RUNNING 60
  show
  echo "   \$ scancel ${jid}_2"
  sc scancel "${jid}_2" || die "scancel ${jid}_2 failed"
  wait_state 2 CANCELLED 30
  show
  echo "   \$ scontrol requeue ${jid}_2"
  sc scontrol requeue "${jid}_2" || die "scontrol requeue of a cancelled element failed"
  sleep 1
  show
  echo "   \$ scontrol update jobid=${jid}_2 starttime=now     (skip the requeue hold)"
  sc scontrol update jobid="${jid}_2" starttime=now || die "scontrol update starttime=now failed"
  wait_state 2 RUNNING 30
  show
  done_step

  step "element 3: kill+requeue in one command (scontrol requeue on the RUNNING element)"
  wait_state 3 RUNNING 60
  echo "   \$ scontrol requeue ${jid}_3"
  sc scontrol requeue "${jid}_3" || die "scontrol requeue of a running element failed"
  sleep 1
  show
  echo "   (held ~10 s with Reason=BeginTime, then it restarts by itself)"
  wait_state 3 RUNNING 60
  show
  done_step

  step "wait (max 90 s) until all four elements have finished and written output"
  local i el ok
  for ((i = 0; i < 180; i++)); do
    ok=1
    for el in 0 1 2 3; do
      grep -q "^done task=$el\$" "$SELFTEST_DIR/${jid}_$el.out" 2>/dev/null || ok=0
    done
    [ -z "$(timeout 10 squeue -h -j "$jid" -o '%i' 2>/dev/null || true)" ] || ok=0
    [ "$ok" = 1 ] && break
    sleep 0.5
  done
  show
  [ "$ok" = 1 ] || die "not all elements finished within 90 s"
  for el in 0 1 2 3; do echo "   -- ${jid}_$el.out:"; sed 's/^/      /' "$SELFTEST_DIR/${jid}_$el.out"; done
  done_step

  step "check states, restart counts and the environment the jobs saw"
  for el in 0 1 2 3; do
    local st restarts
    st=$(timeout 10 squeue -h -t all -j "${jid}_$el" -o '%T' | head -n 1)
    restarts=$(timeout 10 scontrol show job "${jid}_$el" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p' | head -n 1)
    echo "   ${jid}_$el: $st, Restarts=$restarts"
    [ "$st" = COMPLETED ] || die "${jid}_$el ended $st, not COMPLETED"
    case $el in
      2|3) [ "$restarts" -ge 1 ] || die "${jid}_$el was not requeued (Restarts=$restarts)"
           # the rerun truncated the first run's output (sbatch's default --open-mode=truncate)
           grep -q "restarts=1" "$SELFTEST_DIR/${jid}_$el.out" || die "${jid}_$el.out is not the rerun's";;
    esac
    grep -q "^marker=from-the-submitter cwd=$SELFTEST_DIR\$" "$SELFTEST_DIR/${jid}_$el.out" \
      || die "${jid}_$el did not see the submitter's environment / working directory"
  done
  echo "   the jobs saw the submitter's environment (SELFTEST_MARKER) and working directory"
  if sacct_out=$(timeout 10 sacct -j "$jid" 2>&1); then
    echo "   sacct works:"; echo "$sacct_out" | sed 's/^/      /'
  else
    echo "   sacct does not work here (expected: no accounting storage): $(head -n 1 <<<"$sacct_out")"
  fi
  done_step
  local d=$(( $(now_ms) - t0 ))
  printf '== slurm: selftest passed in %d.%03d s\n' $((d / 1000)) $((d % 1000))
}

cmd_status() {
  timeout 10 sinfo || true
  timeout 10 squeue -t all || true
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  selftest) cmd_selftest ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|selftest|status" >&2; exit 2 ;;
esac
