#!/usr/bin/env bash
# The elastic DDP example of docs/examples.md and docs/elastic.md as it is run there: on the
# simulated cluster another lease holds 14 of the 16 GPUs, so the job starts on 2 ranks; after its
# fifth step those GPUs are given back, the lease grows to 4, the job checkpoints at the signal and
# resumes on 4 ranks from the step it stopped at.
#   examples/03-pytorch/elastic_demo.sh [BUILD_DIR]      (default: build)
# As root, Open MPI wants OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
export PATH="$build/launcher:$build/pool/poolctl:$PATH"
# A pool of its own (a sim: pool keeps its leases in the state directory), unless one is given,
# whose renewals (a quarter of the preemption grace) notice the growth within a second.
export POOLRUN_STATE_DIR="${POOLRUN_STATE_DIR:-$(mktemp -d)}"
export POOLRUN_PREEMPT_GRACE="${POOLRUN_PREEMPT_GRACE:-4}"
pool="sim:$root/clusters/sim-ib.toml"
log="$POOLRUN_STATE_DIR/steps.jsonl"
rm -f "$log"

other=$(poolctl --pool "$pool" acquire -n 14 --ttl 300 | awk '{print $1}')
echo "elastic_demo: lease $other holds 14 of the 16 GPUs until the job's fifth step"
poolrun --pool "$pool" -n 2:4 --resize-interval 0 /usr/bin/python3 "$root/examples/03-pytorch/ddp_train.py" \
  --steps 60 --step-seconds 0.2 --log "$log" &
job=$!
for _ in $(seq 600); do  # at most 60 s: torch takes seconds to start
  [ -f "$log" ] && [ "$(wc -l <"$log")" -ge 5 ] && break
  sleep 0.1
done
poolctl --pool "$pool" release "$other" >/dev/null
echo "elastic_demo: released $other"
status=0
wait "$job" || status=$?
echo "elastic_demo: the steps' log (loss, world size, restart) is $log"
exit "$status"
