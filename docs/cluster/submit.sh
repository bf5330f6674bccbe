#!/bin/bash
# Calibrates MODEL on a Slurm cluster as SHARDS array tasks, then merges and
# quantizes in one dependent job. Prints the two job ids.
#   ONNXQ=/path/onnxq MODEL=m.onnx CALIB=/shared/calib OUT=/shared/run QMODEL=/shared/m_q.onnx \
#   SHARDS=8 [OQ_OPTS="..."] [WAIT=1] bash submit.sh [extra sbatch options]
# WAIT=1 blocks until the quantize job has finished and exits with its status.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${MODEL:?}" "${CALIB:?}" "${OUT:?}" "${QMODEL:?}" "${SHARDS:?}"
export ONNXQ MODEL CALIB OUT QMODEL SHARDS OQ_OPTS
mkdir -p "$OUT"
cal=$(sbatch --parsable --export=ALL --array="0-$((SHARDS - 1))" -o "$OUT/calibrate-%a.log" "$@" \
	"$here/calibrate.sbatch")
wait=()
[ "${WAIT:-0}" = 1 ] && wait=(--wait)
echo "calibrate: job $cal"
q=$(sbatch --parsable --export=ALL --dependency="afterok:$cal" --kill-on-invalid-dep=yes \
	-o "$OUT/quantize.log" "${wait[@]}" "$@" "$here/quantize.sbatch")
echo "quantize: job $q"
