"""Resolve a ``requirements.txt`` into a wheelhouse, run by the *target image's* Python and pip.

Run by :mod:`emulator.backends.docker.wheelhouse` in a short-lived helper container of the job's image (with
network access; the job's hosts never have it), so environment markers, wheel tags, the pip
version and what the image already has are exactly the hosts'. Standard library only; runs on
Python 3.8 and later.

``python resolver.py REQUIREMENTS OUT UID GID``: writes ``OUT/wheels/`` (what pip in a host
would download: the distributions the image lacks, plus ``setuptools``/``wheel`` when an sdist
must be built) and ``OUT/result.json`` (``resolved``, ``error``, ``files``). Exit status 0 even
when the requirements cannot be resolved: the hosts' own pip then fails as on SageMaker.
"""

import json
import os
import subprocess
import sys

#: What pip's build isolation needs to build a setuptools sdist offline.
BUILD_BACKEND = ["setuptools", "wheel"]


def _pip(args, log):
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    log.write("$ " + " ".join(cmd) + "\n" + done.stdout + "\n")
    log.flush()
    return done


def main(requirements, out, uid, gid):
    os.chdir(os.path.dirname(requirements))  # relative paths resolve as in the host's cwd
    wheels = os.path.join(out, "wheels")
    os.makedirs(wheels, exist_ok=True)
    report = os.path.join(out, "report.json")
    result = {"resolved": False, "error": "", "files": []}
    with open(os.path.join(out, "pip.log"), "a") as log:
        # As the hosts' `pip install -r requirements.txt` resolves: what is installed and
        # satisfies stays (pip's only-if-needed strategy).
        done = _pip(["install", "--dry-run", "--quiet", "--report", report, "-r", requirements],
                    log)
        if done.returncode != 0:
            result["error"] = done.stdout.strip()[-4000:]
        else:
            fetch, sdist = [], False
            with open(report) as f:
                items = json.load(f)["install"]
            for item in items:
                info = item.get("download_info", {})
                if item.get("is_direct") or "dir_info" in info or "vcs_info" in info:
                    continue  # a path, URL or VCS requirement: the host's pip handles it
                url = info.get("url", "")
                sdist = sdist or not url.endswith(".whl")
                fetch.append(item["metadata"]["name"] + "==" + item["metadata"]["version"])
            if sdist:
                fetch += BUILD_BACKEND
            got = _pip(["download", "--no-deps", "--quiet", "-d", wheels, *fetch], log) \
                if fetch else None
            if got is not None and got.returncode != 0:
                result["error"] = got.stdout.strip()[-4000:]
            else:
                result["resolved"] = True
    result["files"] = sorted(os.listdir(wheels))
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)
    for root, dirs, files in os.walk(out):  # hand the files back to the emulator's user
        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
            os.chown(name, uid, gid)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
