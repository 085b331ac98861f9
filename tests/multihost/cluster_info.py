"""Where things run in a multi-host Cluster, read with the CLI (`phalanx status`,
`phalanx list actors`): the host of a node, of the elastic controller, of each rank."""

import os
import re
import time


def node_hosts(cluster):
    """{short node id: host index} of the alive nodes (by the address's IP)."""
    by_ip = {h.ip: h.index for h in cluster.hosts}
    out = {}
    for n in cluster.alive_nodes():
        ip = n["address"].rsplit(":", 1)[0]
        if ip in by_ip:
            out[n["node"]] = by_ip[ip]
    return out


def list_actors(cluster):
    """[{"actor", "class", "name", "state", "node", "pid"}] from `phalanx list actors`."""
    r = cluster.phalanx(0, "list", "actors", timeout=30)
    out = []
    for line in r.stdout.split("\n")[1:]:
        parts = line.split()
        if len(parts) < 6 or not re.match(r"^[0-9a-f]{6,}$", parts[0]):
            continue
        out.append({"actor": parts[0], "class": parts[1], "name": parts[2], "state": parts[3],
                    "node": parts[4], "pid": int(parts[5]) if parts[5].isdigit() else None})
    return out


def host_of_node(cluster, node, hosts_by_node=None):
    hosts_by_node = hosts_by_node if hosts_by_node is not None else node_hosts(cluster)
    for short, idx in hosts_by_node.items():
        if short.startswith(node) or node.startswith(short):
            return idx
    return None


def controller(cluster, job_id=None):
    """(host index, pid, actor id) of the alive elastic controller (of `job_id`), or None."""
    nodes = node_hosts(cluster)
    for a in list_actors(cluster):
        if a["class"] == "ElasticController" and a["state"] == "ALIVE":
            if job_id and job_id not in a["name"] and a["name"] != "-":
                continue
            return host_of_node(cluster, a["node"], nodes), a["pid"], a["actor"]
    return None


def ranks(cluster):
    """[(host index, pid, actor id)] of the alive trainer actors (every actor that is not a
    controller)."""
    nodes = node_hosts(cluster)
    out = []
    for a in list_actors(cluster):
        if a["class"] != "ElasticController" and a["state"] == "ALIVE" and a["pid"]:
            out.append((host_of_node(cluster, a["node"], nodes), a["pid"], a["actor"]))
    return out


def wait_controller(cluster, job_id, timeout=30):
    """(host index, pid) of the job's alive controller, once it has both; None after timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        ctl = controller(cluster, job_id)
        if ctl and ctl[0] is not None and ctl[1]:
            return ctl
        time.sleep(0.2)
    return None


def job_report(cluster, job_id, lines=15):
    """What to print when a job does not get where a test waited for it: `phalanx job status`
    (its phase, conditions and events), `phalanx list actors`, the time, load and each host's
    node log and worker logs, their last `lines` lines."""
    parts = []
    for args in (("job", "status", job_id), ("list", "actors")):
        try:
            r = cluster.phalanx(0, *args, timeout=30)
            parts.append(f"$ phalanx {' '.join(args)}\n{r.stdout}{r.stderr}")
        except Exception as e:  # a report: say what failed and go on
            parts.append(f"$ phalanx {' '.join(args)}: {e!r}")
    with open("/proc/loadavg") as f:
        parts.append(f"at {time.strftime('%H:%M:%S')}, load {f.read().split()[0]}")
    for i in range(len(cluster.hosts)):
        logs = os.path.join(cluster.session(i), "logs")
        try:
            names = sorted(os.listdir(logs))
        except OSError:
            continue
        for name in names:
            if name != "node.log" and not name.startswith("worker-"):
                continue
            try:
                with open(os.path.join(logs, name), errors="replace") as f:
                    tail = f.readlines()[-lines:]
            except OSError:
                continue
            if tail:
                parts.append(f"--- host {i} {name}\n" + "".join(tail))
    return "\n".join(parts)
