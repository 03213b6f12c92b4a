#!/bin/bash
# ENTRYPOINT of the emulator image. SageMaker runs `docker run IMAGE train`; this receives "train".
#
# The PyTorch DLC's entrypoint is `bash -m start_with_right_hostname.sh`, which rewrites the
# hostname from resourceconfig.json and then runs "$@". Here the emulator already starts each
# container with hostname algo-N, so we only exec the command ("train" is the sagemaker-training
# console script on PATH). What we add: fresh sshd host keys per container (none are baked in the
# image) and /run/sshd, so the toolkit's MPI runner can start /usr/sbin/sshd.
set -e
if ! ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1; then
    ssh-keygen -A >/dev/null 2>&1 || true
fi
mkdir -p /run/sshd
if [ "$#" -eq 0 ]; then
    set -- train
fi
exec "$@"
