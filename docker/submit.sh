#!/usr/bin/env bash
# The one-shot `submit` service of docker-compose.yml (installed in the image
# as sluice-compose-submit): creates the queue and submits the job.
#
# Settings, from the environment (see .env.example):
#   SLUICE_QUEUE          queue name (required)
#   SLUICE_MAX_BATCHES    queue budget: batches held in Redis (default 256)
#   SLUICE_MAX_BYTES      queue budget: bytes held in Redis, K/M/G suffix (default 256M)
#   SLUICE_WORLD          trainer ranks of the coordinated queue; 0 makes a
#                         free queue (any number of consumers) (default 2)
#   SLUICE_REMAINDER      drop | pad: the last incomplete round of an epoch (default drop)
#   SLUICE_LEASE_MS       consumer lease (default: sluice-ctl's)
#   SLUICE_MANIFEST       manifest file, as seen inside the container (required)
#   SLUICE_EPOCHS         epochs of the job (default 1)
#   SLUICE_BATCH_SIZE     records per batch (default 64)
#   SLUICE_SHUFFLE_SEED   shuffle the task order per epoch with this seed (default: no shuffle)
#   SLUICE_SUBMIT         auto | once | recreate (default auto):
#       auto      create the queue when it is missing, and submit the job
#                 unless the queue runs one already (that one is kept: a
#                 second `docker compose up`, say to scale producers, must not
#                 disturb it). After a job finished, the next run submits anew.
#       once      submit only when this run created the queue.
#       recreate  delete the queue first (needed after changing the budgets or
#                 SLUICE_WORLD, which belong to the queue; ends a running job),
#                 then create it and submit.
#   SLUICE_CTL            the sluice-ctl program (default sluice-ctl; for tests)
# sluice-ctl itself reads SLUICE_REDIS_URL and SLUICE_REDIS_PASSWORD_FILE (or
# SLUICE_REDIS_PASSWORD).
#
# Exit status 0 when the queue is ready with a job, 1 otherwise. When the
# submission fails right after this run created the queue, the queue is
# deleted again, so that no run finds a queue without its job (in mode once
# it would skip the submission).
set -euo pipefail

ctl=${SLUICE_CTL:-sluice-ctl}
queue=${SLUICE_QUEUE:?SLUICE_QUEUE is not set}
manifest=${SLUICE_MANIFEST:?SLUICE_MANIFEST is not set}
mode=${SLUICE_SUBMIT:-auto}
world=${SLUICE_WORLD:-2}

log() { echo "submit: $*" >&2; }

case $mode in
    auto | once | recreate) ;;
    *) log "SLUICE_SUBMIT must be auto, once or recreate, not '$mode'"; exit 1 ;;
esac
if ! [[ $world =~ ^[0-9]+$ ]]; then
    log "SLUICE_WORLD must be a number of ranks (0: free queue), not '$world'"
    exit 1
fi

errf=$(mktemp)
trap 'rm -f "$errf"' EXIT

if [[ $mode == recreate ]]; then
    if "$ctl" delete "$queue" 2>"$errf"; then
        log "deleted queue '$queue' (SLUICE_SUBMIT=recreate)"
    elif ! grep -q 'does not exist' "$errf"; then
        cat "$errf" >&2
        exit 1
    fi
fi

create=("$ctl" create "$queue" --max-batches "${SLUICE_MAX_BATCHES:-256}"
        --max-bytes "${SLUICE_MAX_BYTES:-256M}")
if ((world > 0)); then
    create+=(--consumers "$world" --coordinated --remainder "${SLUICE_REMAINDER:-drop}")
fi
[[ -n ${SLUICE_LEASE_MS:-} ]] && create+=(--lease-ms "$SLUICE_LEASE_MS")

created=0
if "${create[@]}" 2>"$errf"; then
    created=1
elif grep -q 'exists already' "$errf"; then
    # The ranks belong to the queue: trainers of another world size would
    # all be refused, so say it here, once, with the way out.
    info=$("$ctl" info "$queue")
    ranks=$(sed -n 's/^coordinated: \([0-9]*\) ranks.*/\1/p' <<<"$info")
    if [[ ${ranks:-0} != "$world" ]]; then
        log "queue '$queue' exists with ${ranks:-0} ranks (0: not coordinated), but SLUICE_WORLD=$world;" \
            "run the submit service once with SLUICE_SUBMIT=recreate (this ends the queue's job)"
        exit 1
    fi
    if [[ $mode == once ]]; then
        log "queue '$queue' exists already: not submitting (SLUICE_SUBMIT=once)"
        exit 0
    fi
else
    cat "$errf" >&2
    exit 1
fi

submit=("$ctl" submit "$queue" --manifest "$manifest" --epochs "${SLUICE_EPOCHS:-1}"
        --batch-size "${SLUICE_BATCH_SIZE:-64}")
[[ -n ${SLUICE_SHUFFLE_SEED:-} ]] && submit+=(--shuffle-seed "$SLUICE_SHUFFLE_SEED")

if "${submit[@]}" 2>"$errf"; then
    cat "$errf" >&2
    exit 0
fi
# sluice-ctl refuses to replace a job that still runs ("...: the queue runs
# a job (epoch E of N); ..."): that job is the one to keep.
if ((!created)) && grep -q 'runs a job' "$errf"; then
    log "queue '$queue' runs a job already: keeping it ($(sed 's/^sluice-ctl: //' "$errf" | head -n 1))"
    exit 0
fi
cat "$errf" >&2
if ((created)); then
    log "submission failed: deleting the queue this run created"
    "$ctl" delete "$queue" >/dev/null || log "could not delete queue '$queue'"
fi
exit 1
