#!/usr/bin/python3
"""Writes the binary seed corpora of the fuzz targets into fuzz/corpus/ (the YAML seeds of
job_spec are written by hand). Run it again after changing a target's input format:

    /usr/bin/python3 fuzz/make_seeds.py

  msgpack_args  byte 0 picks the method (msgpack_args_fuzzer.cc's kMethods; the last index is
                the constructor), then the msgpack argument array
  upload        FuzzedDataProvider input: strings from the front, integers from the back
  gcs_requests  byte 0 indexes kHandlers in gcs_requests_fuzzer.cc, then the request proto
                (encoded from text format by protoc --encode)
"""
import os
import struct
import subprocess
import sys

import msgpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


# msgpack_args: the order of kMethods, then the constructor.
METHODS = ["Add", "Flags", "Concat", "Sum", "Count", "Nested", "Pair", "Nothing", "Name"]
CTOR = len(METHODS)


def call(method, *args):
    index = CTOR if method == "ctor" else METHODS.index(method)
    return bytes([index]) + msgpack.packb(list(args), use_bin_type=True)


write("msgpack_args", "ctor", call("ctor", "worker", 41))
write("msgpack_args", "add", call("Add", 1))
write("msgpack_args", "flags", call("Flags", True, -1, 65535, -(2**31), 2**64 - 1, 1.5))
write("msgpack_args", "concat", call("Concat", "a", ["b", "c", ""]))
write("msgpack_args", "sum", call("Sum", [1.0, 2.5, -3]))
write("msgpack_args", "count", call("Count", {"a": 1, "b": -2}))
write("msgpack_args", "nested", call("Nested", [[1, 2], [], [3]]))
write("msgpack_args", "pair", call("Pair", [7, "seven"]))
write("msgpack_args", "nothing", call("Nothing"))
write("msgpack_args", "wrong_types", call("Add", "not a number"))
write("msgpack_args", "wrong_arity", call("Concat", "only one"))


# upload: FuzzedDataProvider reads ConsumeRandomLengthString from the front (a backslash
# followed by any other byte ends the string; two backslashes are one) and integers from the
# back (the last byte first, most significant first).
def upload(entries):
    front, back = b"", []
    for path, content, mode in entries:
        for s in (path, content):
            front += s.replace(b"\\", b"\\\\") + b"\\n"
        back += list(struct.pack(">I", mode))
    return front + bytes(reversed(back))


write("upload", "project", upload([
    (b"train.py", b"print('hi')\n", 0o755),
    (b"src/model/net.py", b"import torch\n", 0o644),
    (b"data/x.bin", b"\x00\x01", 0o4755),  # setuid: dropped
    (b"README", b"", 0),                    # no mode: 0644
]))
write("upload", "traps", upload([  # links planted by the target
    (b"out/escape", b"x", 0o644),
    (b"f", b"x", 0o644),
    (b"self/x", b"x", 0o644),
    (b"sub/up/y", b"x", 0o644),
    (b"file/z", b"x", 0o644),
    (b"ok.txt", b"x", 0o600),
]))
write("upload", "hostile", upload([
    (b"../etc/passwd", b"x", 0o644),
    (b"/etc/passwd", b"x", 0o644),
    (b"a//b", b"x", 0o644),
    (b"a/./b", b"x", 0o644),
    (b"a/b\x00c", b"x", 0o644),
    (b"dir", b"x", 0o644),
    (b"dir/file", b"x", 0o644),
    (b"n" * 256, b"x", 0o644),
]))

# gcs_requests: the order of kHandlers.
HANDLERS = [
    ("GetClusterInfo", "GetClusterInfoRequest"), ("RegisterNode", "RegisterNodeRequest"),
    ("Heartbeat", "HeartbeatRequest"), ("UnregisterNode", "UnregisterNodeRequest"),
    ("GetAllNodes", "GetAllNodesRequest"), ("KvPut", "KvPutRequest"), ("KvGet", "KvGetRequest"),
    ("KvDelete", "KvDeleteRequest"), ("KvList", "KvListRequest"),
    ("CreateActor", "CreateActorRequest"), ("ReportActorState", "ReportActorStateRequest"),
    ("KillActor", "KillActorViaGcsRequest"), ("RenewActorLease", "RenewActorLeaseRequest"),
    ("UpdateActor", "UpdateActorRequest"), ("GetActor", "GetActorRequest"),
    ("ListActors", "ListActorsRequest"), ("UpdateJob", "UpdateJobRequest"),
    ("GetJob", "GetJobRequest"), ("ListJobs", "ListJobsRequest"),
    ("SubmitJob", "SubmitJobRequest"), ("StopJob", "StopJobRequest"),
    ("ScaleJob", "ScaleJobRequest"), ("JobLogs", "JobLogsRequest"),
    ("ReportJob", "ReportJobRequest"), ("CreatePlacementGroup", "CreatePlacementGroupRequest"),
    ("RemovePlacementGroup", "RemovePlacementGroupRequest"),
    ("ReleasePlacementGroupBundle", "ReleasePlacementGroupBundleRequest"),
    ("GetPlacementGroup", "GetPlacementGroupRequest"),
    ("WaitPlacementGroupReady", "WaitPlacementGroupReadyRequest"),
    ("ListPlacementGroups", "ListPlacementGroupsRequest"),
    ("IssueCertificate", "IssueCertificateRequest"),
]
METHOD_INDEX = {m: i for i, (m, _) in enumerate(HANDLERS)}


def gcs(name, method, text):
    request = dict(HANDLERS)[method]
    encoded = subprocess.run(
        ["protoc", "-I", ROOT, f"--encode=phalanx.rpc.{request}", "base/proto/gcs.proto"],
        input=text.encode(), stdout=subprocess.PIPE, check=True, cwd=ROOT).stdout
    write("gcs_requests", name, bytes([METHOD_INDEX[method]]) + encoded)


ELASTIC_SPEC = ("name: fz\\ntrainer: T\\ncodePath: /bin/sh\\nreplicas: 2\\n"
                "data: {numSamples: 64, globalBatch: 8}\\nsteps: 10\\nresources: {CPU: 1}\\n")
gcs("register_node", "RegisterNode",
    'node { node_id: "n1" hostname: "h1" total { amounts { key: "CPU" value: 4 } } '
    'labels { key: "zone" value: "a" } }')
gcs("heartbeat", "Heartbeat", 'node_id: "n1" available { amounts { key: "CPU" value: 2 } }')
gcs("unregister_node", "UnregisterNode", 'node_id: "n1" reason: "stopped"')
gcs("kv_put", "KvPut", 'namespace: "ns" key: "k" value: "v" overwrite: true')
gcs("kv_get", "KvGet", 'namespace: "ns" key: "k"')
gcs("kv_delete_prefix", "KvDelete", 'namespace: "ns" key: "" by_prefix: true')
gcs("kv_list", "KvList", 'namespace: "ns" prefix: "k"')
gcs("create_actor", "CreateActor",
    'actor { actor_id: "a1" name: "counter" namespace: "ns" class_name: "Counter" '
    'language: "cpp" resources { amounts { key: "CPU" value: 1 } } max_restarts: 2 '
    'job_id: "j1" init_args: "\\x92\\xa1x\\x01" }')
gcs("create_actor_in_pg", "CreateActor",
    'actor { class_name: "C" placement_group_id: "pg1" '
    'resources { amounts { key: "CPU" value: 1 } } }')
gcs("report_actor_alive", "ReportActorState",
    'actor_id: "a1" attempt: 0 node_id: "n1" state: ACTOR_ALIVE worker_address: "127.0.0.1:1" pid: 7')
gcs("kill_actor", "KillActor", 'actor_id: "a1" no_restart: true')
gcs("renew_lease", "RenewActorLease", 'actor_id: "a1" attempt: 0 timeout_ms: 1000')
gcs("get_actor_by_name", "GetActor", 'name: "counter" namespace: "ns"')
gcs("list_actors", "ListActors", 'job_id: "j1"')
gcs("update_job", "UpdateJob", 'job { job_id: "j2" name: "x" }')
gcs("submit_elastic", "SubmitJob", f'kind: "elastic" spec_yaml: "{ELASTIC_SPEC}"')
gcs("submit_driver", "SubmitJob",
    'entrypoint: "python3" entrypoint: "train.py" upload_id: "0123abcd" '
    'working_dir: "/home/me/project" env { key: "A" value: "1" } submission_id: "s1"')
gcs("stop_job", "StopJob", 'job_id: "fz-000000" grace_s: 1')
gcs("scale_job", "ScaleJob", 'job_id: "fz-000000" replicas: 3 ranks: 1')
gcs("job_logs", "JobLogs", 'job_id: "j2" offset: 0')
gcs("report_job", "ReportJob", 'job_id: "j2" finished: true driver_pid: 1')
gcs("create_pg", "CreatePlacementGroup",
    'placement_group { placement_group_id: "pg1" name: "g" strategy: "STRICT_SPREAD" '
    'bundles { resources { amounts { key: "CPU" value: 1 } } } '
    'bundles { resources { amounts { key: "CPU" value: 1 } } } }')
gcs("release_bundle", "ReleasePlacementGroupBundle", 'placement_group_id: "pg1" bundle_index: 1')
gcs("remove_pg", "RemovePlacementGroup", 'placement_group_id: "pg1"')
gcs("get_pg_by_name", "GetPlacementGroup", 'name: "g"')
gcs("wait_pg", "WaitPlacementGroupReady", 'placement_group_id: "pg1" timeout_ms: 10')
gcs("cluster_info", "GetClusterInfo", "")
gcs("issue_certificate", "IssueCertificate",
    'public_key_pem: "-----BEGIN PUBLIC KEY-----\\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAECzJjS+06oz9agjzivHQqcBaGu+XD\\nZlRjI4ooISJjQUh5ZUceEIcVnm8oRRka30GFf8bXt02Q/gpePcvoVBEbDg==\\n-----END PUBLIC KEY-----\\n" names: "10.0.0.7" names: "worker-7"')
print(f"make_seeds: wrote the seeds under {CORPUS}", file=sys.stderr)
