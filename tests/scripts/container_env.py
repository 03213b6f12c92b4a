"""Writes what the host's container process (PID 1) got: its environment and eth0's address.

Local rank 0 of each host writes ``<SM_OUTPUT_DATA_DIR>/<host>.json``; the test compares it with
what ``python -m emulator plan`` printed for the same job.
"""

import fcntl
import json
import os
import socket
import struct

SIOCGIFADDR = 0x8915


def address(ifname: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


if os.environ.get("LOCAL_RANK", "0") == "0":
    with open("/proc/1/environ", "rb") as f:
        items = f.read().decode(errors="replace").split("\0")
    env = dict(item.split("=", 1) for item in items if "=" in item)
    with open("/proc/1/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0")[:-1]]
    with open("/etc/hosts") as f:
        etc_hosts = f.read()
    host = socket.gethostname()
    out = os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], f"{host}.json")
    with open(out, "w") as f:
        json.dump({"host": host, "env": env, "address": address("eth0"), "cmdline": cmdline,
                   "hosts": etc_hosts}, f)
