#!/usr/bin/env bash
# cluster_slurm.sh - the Slurm recipe of docs/cluster.md on a real Slurm: a
# one-node cluster (munged, slurmctld, slurmd from Debian's munge and slurm
# packages) started on localhost in a temporary folder with its own ports and
# munge socket, torn down at exit. docs/cluster/submit.sh submits a
# calibration job array (4 shards) and the dependent merge + quantize job;
# the model it writes must be byte-identical to one
# `onnxq quantize --no-bias-correction` on the same samples.
# Skipped (with the reason) when not root or when the daemons are missing or
# do not come up.
# usage: cluster_slurm.sh ONNXQ   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=$(realpath "${1:-$root/build/onnxq}")
skipall() { skip "$1"; finish; exit; }

[ "$(id -u)" -eq 0 ] || skipall "not root: slurmd and munged need root here"
for b in munged mungekey slurmctld slurmd sbatch sinfo; do
	command -v "$b" >/dev/null || skipall "$b not installed (apt-get install munge slurmctld slurmd slurm-client)"
done

tmp=$(mktemp -d /tmp/oq-slurm.XXXXXX)
export SLURM_CONF=$tmp/slurm.conf
stop() {
	for p in slurmd slurmctld munge; do
		[ -f "$tmp/$p.pid" ] && kill "$(cat "$tmp/$p.pid")" 2>/dev/null
	done
	sleep 1
	rm -rf "$tmp"
}
trap stop EXIT
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/run"
host=$(hostname -s)
# Ports: away from Slurm's defaults (6817/6818), so a real cluster is not disturbed.
cat >"$SLURM_CONF" <<CONF
ClusterName=onnxqtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=onnxq Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
mungekey -c -f -k "$tmp/munge.key" >/dev/null 2>&1 && chmod 600 "$tmp/munge.key" ||
	skipall "mungekey could not create a key"
munged --force --socket="$tmp/munge.sock" --key-file="$tmp/munge.key" --log-file="$tmp/log/munge.log" \
	--pid-file="$tmp/munge.pid" --seed-file="$tmp/munge.seed" >/dev/null 2>&1 ||
	skipall "munged did not start: $(tail -n 1 "$tmp/log/munge.log" 2>/dev/null)"
slurmctld -f "$SLURM_CONF" >/dev/null 2>&1 || skipall "slurmctld did not start"
slurmd -f "$SLURM_CONF" >/dev/null 2>&1 || skipall "slurmd did not start"
up=0
for _ in $(seq 60); do
	if sinfo -h -o %t 2>/dev/null | grep -q idle; then up=1; break; fi
	sleep 1
done
[ "$up" = 1 ] || skipall "the node did not become idle in 60 s: $(tail -n 1 "$tmp/log/slurmd.log" 2>/dev/null)"
ok "one-node Slurm cluster up ($(sinfo -h -o '%P %t %N'))"

model=$root/models/tiny_cnn.onnx
calib=$root/models/tiny_cnn_calib
# The default placement leaves the tiny CNN float (ONNX Runtime runs it faster so): --prefer
# accuracy quantizes it, so the comparisons below are between quantized models.
opts="--prefer accuracy"
if ! "$onnxq" quantize "$model" -o "$tmp/one.onnx" --calib "$calib" --no-bias-correction $opts \
	2>"$tmp/one.err"; then
	bad "one-machine quantize failed: $(tail -n 1 "$tmp/one.err")"
	finish
	exit
fi
if grep -Eq '[1-9][0-9]* QuantizeLinear' "$tmp/one.err"; then
	ok "the one-machine model is quantized ($(grep -Eo '[0-9]+ QuantizeLinear' "$tmp/one.err"))"
else
	bad "the one-machine model has no QuantizeLinear: $(tail -n 2 "$tmp/one.err" | tr '\n' ' ')"
fi
if ONNXQ=$onnxq MODEL=$model CALIB=$calib OUT=$tmp/run QMODEL=$tmp/cluster.onnx SHARDS=4 WAIT=1 \
	OQ_OPTS="$opts" bash "$root/docs/cluster/submit.sh" >"$tmp/submit.out" 2>&1; then
	ok "submit.sh: 4 calibration tasks and the dependent quantize job ran ($(tr '\n' ' ' <"$tmp/submit.out"))"
else
	bad "submit.sh failed: $(tail -n 2 "$tmp/submit.out" | tr '\n' ' ') $(tail -n 2 "$tmp/run/quantize.log" 2>/dev/null)"
	finish
	exit
fi
n=$(ls "$tmp"/run/shard-*.stats 2>/dev/null | wc -l)
[ "$n" -eq 4 ] && ok "4 shard statistics files" || bad "expected 4 shard statistics files, found $n"
if cmp -s "$tmp/one.onnx" "$tmp/cluster.onnx"; then
	ok "the cluster's model is byte-identical to one quantize --no-bias-correction $opts"
else
	bad "the cluster's model differs from one quantize --no-bias-correction"
fi
# control: a different option in the cluster run changes the model, so cmp can fail
if ONNXQ=$onnxq MODEL=$model CALIB=$calib OUT=$tmp/run2 QMODEL=$tmp/cluster2.onnx SHARDS=2 WAIT=1 \
	OQ_OPTS="$opts --method minmax" bash "$root/docs/cluster/submit.sh" >"$tmp/submit2.out" 2>&1 &&
	! cmp -s "$tmp/one.onnx" "$tmp/cluster2.onnx"; then
	ok "control: --method minmax on the cluster gives another model"
else
	bad "control: --method minmax run failed or gave the same model"
fi
finish
