#!/usr/bin/env bash
# CI: sweeps against a real single-node Slurm cluster (not a mock).
#
# Runs examples/sweep-small.toml (12 runs: 2 strategies x 2 memory sizes x 3 seeds) three ways:
# locally with --jobs 1, locally with --jobs 2, and as one Slurm job array on the cluster that
# .ci/slurm.sh starts on this machine. One array task is killed mid-run (after its first
# checkpoint) with `scancel` and requeued with `scontrol requeue`; it must resume from its
# checkpoint. Then the three sweeps' aggregated tables and every run's report (less the
# machine-dependent timings, throughput and memory) must be identical. The daemons are stopped at the end, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=$PWD/target/release/engram
SW=examples/sweep-small.toml
T=$PWD/target/ci-sweep
rm -rf "$T"
mkdir -p "$T"

bash .ci/slurm.sh up
trap 'bash .ci/slurm.sh down >/dev/null 2>&1 || true' EXIT

"$BIN" sweep validate "$SW" -q

SECONDS=0
"$BIN" sweep run "$SW" --jobs 1 --out "$T/j1" -q
J1=$SECONDS
SECONDS=0
"$BIN" sweep run "$SW" --jobs 2 --out "$T/j2" -q
J2=$SECONDS
echo "local sweep of 12 runs: --jobs 1 ${J1} s, --jobs 2 ${J2} s"

SECONDS=0
"$BIN" sweep submit "$SW" --out "$T/slurm"
JOB=$(python3 -c "import json; print(json.load(open('$T/slurm/slurm/jobs.json'))[-1]['job_id'])")
names() { python3 -c "import json; [print(i, r['name']) for i, r in enumerate(json.load(open('$T/slurm/grid.json'))['runs'])]"; }

# Kill one array task mid-run (scancel) and requeue it (scontrol requeue): the first task seen
# RUNNING whose run already has a checkpoint and no report. A run takes about a second, so one
# can finish before the cancel reaches it: then it is left done, and the next one is tried.
requeued=""
tried=" "
for _ in $(seq 1 600); do
  running=$(squeue -h -r -j "$JOB" -t RUNNING -o "%i" 2>/dev/null || true)
  cand=""
  while read -r i name; do
    if [[ "$tried" != *" $i "* ]] && grep -qx "${JOB}_$i" <<<"$running" &&
       [ -d "$T/slurm/$name/checkpoints" ] && [ ! -f "$T/slurm/$name/report.json" ]; then
      cand="$i $name"
      break
    fi
  done < <(names)
  if [ -n "$cand" ]; then
    read -r ci cname <<<"$cand"
    scancel "${JOB}_$ci"
    tried="$tried$ci "
    for _ in $(seq 1 100); do
      st=$(squeue -h -j "${JOB}_$ci" -o "%T" 2>/dev/null || true)
      [ "$st" != RUNNING ] && [ "$st" != COMPLETING ] && break
      sleep 0.1
    done
    if [ ! -f "$T/slurm/$cname/report.json" ]; then
      requeued="$cand"
      break
    fi
    echo "array task ${JOB}_$ci finished before the cancel reached it; trying another"
  fi
  sleep 0.2
done
read -r RI RNAME <<<"$requeued"
# Requeue it once Slurm has it CANCELLED (a requeue is refused while it is still completing).
for _ in $(seq 1 100); do
  scontrol requeue "${JOB}_$RI" 2>/dev/null && break
  sleep 0.2
done
echo "cancelled array task ${JOB}_$RI ($RNAME) mid-run and requeued it"
# A requeued task waits out Slurm's credential hold (cred_expire); start it as soon as it is
# pending again.
for _ in $(seq 1 50); do
  st=$(squeue -h -j "${JOB}_$RI" -o "%T" 2>/dev/null || true)
  [ "$st" = PENDING ] && { scontrol update jobid="${JOB}_$RI" starttime=now 2>/dev/null || true; break; }
  sleep 0.2
done

for _ in $(seq 1 600); do
  # Runs prune their old checkpoints as they go: a directory can vanish under find, which
  # then exits 1 (and pipefail would end the script); count what is there.
  n=$( (find "$T/slurm" -name report.json 2>/dev/null || true) | wc -l)
  left=$(squeue -h -r -j "$JOB" 2>/dev/null | wc -l)
  [ "$n" -ge 12 ] && [ "$left" -eq 0 ] && break
  sleep 1
done
SLURM_S=$SECONDS
"$BIN" sweep status "$T/slurm"
[ "$( (find "$T/slurm" -name report.json 2>/dev/null || true) | wc -l)" -eq 12 ] || { echo "the Slurm sweep did not finish in time"; exit 1; }
echo "Slurm sweep of 12 runs (2 at a time, one requeued): ${SLURM_S} s"

for d in j1 j2 slurm; do "$BIN" sweep report "$T/$d" -q >"$T/$d.table"; done
cat "$T/slurm.table"

python3 - "$T" "$RNAME" <<'PY'
import glob, json, os, sys
t, requeued = sys.argv[1], sys.argv[2]
MACHINE = ("timings", "throughput", "memory")
def runs(d):
    out = {}
    for f in glob.glob(f"{t}/{d}/**/report.json", recursive=True):
        r = json.load(open(f))
        for k in MACHINE:
            r.pop(k, None)
        out[os.path.relpath(f, f"{t}/{d}")] = r
    return out
def table(d):
    s = json.load(open(f"{t}/{d}/sweep.json"))
    for c in s["cells"]:
        for k in ("time_s", "peak_mib"):
            c["metrics"].pop(k)
    return s
a, b, c = runs("j1"), runs("j2"), runs("slurm")
assert len(a) == 12, len(a)
assert a == b, "--jobs 1 and --jobs 2 differ: " + str([k for k in a if a[k] != b.get(k)])
assert a == c, "the Slurm sweep differs from the local one: " + str([k for k in a if a[k] != c.get(k)])
assert table("j1") == table("j2") == table("slurm"), "the aggregated tables differ"
st = json.load(open(f"{t}/slurm/state/{requeued.replace('/', '__')}.json"))
assert st["attempts"] >= 2 and st["status"] == "done", st
log = open(f"{t}/slurm/logs/{requeued.replace('/', '__')}.log").read()
assert "== engram sweep: resume" in log, "the requeued task did not resume from its checkpoint"
print(f"identical: 12 reports and the aggregated table, local --jobs 1 = --jobs 2 = Slurm; "
      f"requeued {requeued} resumed (attempt {st['attempts']})")
PY
