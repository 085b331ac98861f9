"""The Kubernetes manifests (deploy/kubernetes) and the image (deploy/docker/Dockerfile),
checked by reading them: no Kubernetes cluster runs here, so these tests hold the manifests
to what Phalanx needs of a pod (flags `phalanx start --help` lists, probes on /healthz over
HTTPS, resources that the flags follow, one Secret, the head's sessions on its volume), not
to what a cluster would do with them."""

import json
import os
import re
import shlex
import subprocess

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MANIFESTS = os.path.join(ROOT, "deploy", "kubernetes")
DOCKERFILE = os.path.join(ROOT, "deploy", "docker", "Dockerfile")
PHALANX = os.path.join(ROOT, "build", "bin", "phalanx")

# The Secret the README's `kubectl create secret generic` makes, and its keys.
SECRET = "phalanx-cluster"
SECRET_KEYS = {"token", "ca.pem", "ca.key"}
WORKER_SECRET_KEYS = {"token", "ca.pem"}  # never the CA's key

WORKLOADS = ("StatefulSet", "Deployment", "DaemonSet")
ENV_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def manifest_files():
    return sorted(f for f in os.listdir(MANIFESTS)
                  if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")


def load_objects():
    objects = []
    for name in manifest_files():
        with open(os.path.join(MANIFESTS, name)) as f:
            for doc in yaml.safe_load_all(f):
                if doc is not None:
                    objects.append(doc)
    return objects


OBJECTS = load_objects()


def of_kind(kind):
    return [o for o in OBJECTS if o.get("kind") == kind]


def workloads():
    return [o for o in OBJECTS if o.get("kind") in WORKLOADS]


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def containers(workload):
    return pod_spec(workload)["containers"]


def is_head(container):
    return "--head" in container.get("args", [])


def head():
    found = [(w, c) for w in workloads() for c in containers(w) if is_head(c)]
    assert len(found) == 1, f"expected one `phalanx start --head` container, found {len(found)}"
    return found[0]


def workers():
    found = [(w, c) for w in workloads() for c in containers(w) if not is_head(c)]
    assert found, "no worker container (`phalanx start --address ...`)"
    return found


def flag_value(container, flag):
    """The argument after `flag` in the container's args; None when the flag is not there."""
    args = container.get("args", [])
    for i, a in enumerate(args):
        if a == flag:
            assert i + 1 < len(args), f"{container['name']}: {flag} has no value"
            return str(args[i + 1])
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def env_behind(container, flag):
    """The env entry that the value of `flag` is, as `$(NAME)`."""
    value = flag_value(container, flag)
    assert value is not None, f"{container['name']}: no {flag}"
    m = re.fullmatch(ENV_REF, value)
    assert m, f"{container['name']}: {flag} {value} is not $(NAME) of an env variable"
    env = env_of(container)
    assert m.group(1) in env, f"{container['name']}: {flag} uses $({m.group(1)}), not in env"
    return env[m.group(1)]


def services_selecting(pod_labels):
    return [s for s in of_kind("Service")
            if s["spec"].get("selector")
            and all(pod_labels.get(k) == v for k, v in s["spec"]["selector"].items())]


def phalanx_help(*subcommand):
    """What the built `phalanx [subcommand] --help` prints."""
    if not os.access(PHALANX, os.X_OK):
        pytest.fail(f"{PHALANX} is not built: run scripts/setup.sh first")
    out = subprocess.run([PHALANX, *subcommand, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def listed_flags(help_text):
    """The long options in a CLI11 help text: each option line starts with `  -x,--name` or
    `  --name`."""
    flags = set()
    for line in help_text.splitlines():
        m = re.match(r"\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)", line)
        if m:
            flags.add(m.group(1))
    return flags


def test_every_manifest_is_in_the_kustomization_and_it_names_no_missing_file():
    with open(os.path.join(MANIFESTS, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == manifest_files()


def test_every_object_has_an_api_version_a_kind_and_a_name():
    assert OBJECTS, f"no manifests in {MANIFESTS}"
    for o in OBJECTS:
        assert o.get("apiVersion") and o.get("kind"), o
        assert o.get("metadata", {}).get("name"), f"a {o['kind']} without metadata.name"


def test_a_statefulsets_selector_matches_its_pod_labels_and_names_an_existing_service():
    services = {s["metadata"]["name"] for s in of_kind("Service")}
    for s in of_kind("StatefulSet"):
        name = s["metadata"]["name"]
        selector = s["spec"]["selector"]["matchLabels"]
        labels = s["spec"]["template"]["metadata"]["labels"]
        assert selector and all(labels.get(k) == v for k, v in selector.items()), \
            f"{name}: selector {selector} does not match the pod labels {labels}"
        assert s["spec"].get("serviceName") in services, \
            f"{name}: serviceName {s['spec'].get('serviceName')!r} is none of {sorted(services)}"
        for other in of_kind("StatefulSet"):
            if other is not s:
                other_labels = other["spec"]["template"]["metadata"]["labels"]
                assert not all(other_labels.get(k) == v for k, v in selector.items()), \
                    f"{name}'s selector also matches {other['metadata']['name']}'s pods"


def test_the_head_has_one_replica_and_a_service_on_the_gcs_and_dashboard_ports():
    w, c = head()
    assert w["kind"] == "StatefulSet" and w["spec"]["replicas"] == 1
    services = services_selecting(w["spec"]["template"]["metadata"]["labels"])
    assert services, "no Service selects the head's pods"
    ports = {p["port"]: p for s in services for p in s["spec"]["ports"]}
    declared = {p["name"]: p["containerPort"] for p in c["ports"]}
    gcs_port = int(flag_value(c, "--port"))
    dashboard_port = int(flag_value(c, "--dashboard-port"))
    for port in (gcs_port, dashboard_port):
        assert port in ports, f"the head's Service does not expose {port}"
        target = ports[port].get("targetPort", port)
        assert declared.get(target, target) == port, \
            f"the Service's port {port} targets {target}, not the head's {port}"


def test_every_container_probes_healthz_over_https_on_a_port_it_declares_and_serves():
    for w in workloads():
        for c in containers(w):
            declared = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            # The port the process serves /healthz on: the dashboard's on the head, the node
            # manager's /metrics port on a worker.
            flag = "--dashboard-port" if is_head(c) else "--metrics-port"
            assert flag_value(c, flag), f"{c['name']}: no {flag}, so no known /healthz port"
            serves = int(flag_value(c, flag))
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = c.get(kind)
                if probe is None and kind == "startupProbe":
                    continue
                where = f"{w['metadata']['name']}/{c['name']} {kind}"
                assert probe is not None, f"{where}: missing"
                get = probe.get("httpGet")
                assert get, f"{where}: not an httpGet probe"
                assert get.get("path") == "/healthz", f"{where}: path {get.get('path')}"
                assert get.get("scheme") == "HTTPS", f"{where}: scheme {get.get('scheme')}"
                port = get.get("port")
                number = declared.get(port) if isinstance(port, str) else port
                assert number in declared.values(), f"{where}: port {port} is not declared"
                assert number == serves, f"{where}: port {number}, but {flag} is {serves}"


def test_the_resource_flags_follow_the_containers_requests_and_limits():
    for w in workloads():
        for c in containers(w):
            where = f"{w['metadata']['name']}/{c['name']}"
            requests = c.get("resources", {}).get("requests", {})
            limits = c.get("resources", {}).get("limits", {})
            assert "cpu" in requests and "memory" in requests, f"{where}: requests {requests}"
            assert "memory" in limits, f"{where}: no limits.memory for --memory to follow"
            for flag, field in (("--num-cpus", "requests.cpu"), ("--memory", "limits.memory")):
                ref = env_behind(c, flag).get("valueFrom", {}).get("resourceFieldRef", {})
                assert ref.get("resource") == field, f"{where}: {flag} is not fed from {field}"
                assert str(ref.get("divisor", "1")) == "1", \
                    f"{where}: {flag} needs whole CPUs / bytes (divisor 1), not {ref['divisor']}"
            # The Downward API cannot read nvidia.com/gpu: the literal must match the limit.
            gpus = env_behind(c, "--num-gpus")
            assert "value" in gpus, f"{where}: --num-gpus must be a literal (see the comment)"
            assert float(gpus["value"]) == float(limits.get("nvidia.com/gpu", 0)), \
                f"{where}: --num-gpus {gpus['value']} but nvidia.com/gpu " \
                f"{limits.get('nvidia.com/gpu', 0)}"


def test_the_node_ip_is_the_pod_ip():
    for w in workloads():
        for c in containers(w):
            ref = env_behind(c, "--node-ip-address").get("valueFrom", {}).get("fieldRef", {})
            assert ref.get("fieldPath") == "status.podIP", f"{c['name']}: {ref}"


def test_every_variable_the_args_use_is_in_the_containers_env():
    for w in workloads():
        for c in containers(w):
            env = env_of(c)
            for a in c.get("args", []) + c.get("command", []):
                for name in ENV_REF.findall(str(a)):
                    assert name in env, f"{c['name']}: $({name}) is not in env"


def test_the_secret_is_named_alike_everywhere_and_workers_never_get_the_ca_key():
    for w in workloads():
        spec = pod_spec(w)
        for c in spec["containers"]:
            names = [e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", [])
                     if "secretKeyRef" in e.get("valueFrom", {})]
            names += [e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e]
            assert set(names) <= {SECRET}, f"{c['name']}: secrets {names}"
            # The token from the Secret on the head too (it must survive the head pod, or the
            # workers are refused by its replacement), in PHALANX_TOKEN, which `phalanx start`
            # reads: never on the command line, where `ps` shows it to every user.
            token = env_of(c).get("PHALANX_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef")
            assert token == {"name": SECRET, "key": "token"}, \
                f"{c['name']}: PHALANX_TOKEN from {token}"
            args = [str(a) for a in c.get("args", []) + c.get("command", [])]
            assert not any(a == "--token" or a.startswith("--token=") for a in args), \
                f"{c['name']}: the token is on the command line: {args}"
        volumes = [v for v in spec.get("volumes", []) if "secret" in v]
        assert [v["secret"]["secretName"] for v in volumes] == [SECRET], \
            f"{w['metadata']['name']}: secret volumes {volumes}"
        secret = volumes[0]["secret"]
        keys = {i["key"] for i in secret["items"]} if "items" in secret else SECRET_KEYS
        assert keys <= SECRET_KEYS, f"{w['metadata']['name']}: unknown keys {keys - SECRET_KEYS}"
        for c in spec["containers"]:
            mounts = [m for m in c.get("volumeMounts", []) if m["name"] == volumes[0]["name"]]
            assert len(mounts) == 1 and mounts[0].get("readOnly"), f"{c['name']}: {mounts}"
            assert flag_value(c, "--ca-dir") == mounts[0]["mountPath"], \
                f"{c['name']}: --ca-dir is not where the Secret is mounted"
            expected = SECRET_KEYS if is_head(c) else WORKER_SECRET_KEYS
            assert keys == expected, f"{c['name']}: mounts {sorted(keys)}, not {sorted(expected)}"


def test_the_heads_sessions_and_so_redis_aof_live_on_its_persistent_volume():
    w, c = head()
    claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
    assert claims, "the head has no volumeClaimTemplate"
    tmpdir = env_of(c).get("PHALANX_TMPDIR", {}).get("value")
    assert tmpdir, "the head sets no PHALANX_TMPDIR"
    on_claim = [m for m in c.get("volumeMounts", []) if m["name"] in claims
                and (tmpdir + "/").startswith(m["mountPath"].rstrip("/") + "/")]
    assert on_claim, f"PHALANX_TMPDIR {tmpdir} is on none of the volumes {sorted(claims)}"
    # Below the mount, not the mount itself: Phalanx makes its root 0700, and a mount's root
    # is group-writable under fsGroup.
    assert tmpdir.rstrip("/") != on_claim[0]["mountPath"].rstrip("/")


def test_workers_join_through_the_head_services_dns_name_and_gcs_port():
    head_workload, head_container = head()
    head_labels = head_workload["spec"]["template"]["metadata"]["labels"]
    head_services = services_selecting(head_labels)
    gcs_port = int(flag_value(head_container, "--port"))
    for w, c in workers():
        address = flag_value(c, "--address")
        assert address, f"{c['name']}: no --address"
        host, port = address.rsplit(":", 1)
        service = next((s for s in head_services
                        if host.split(".")[0] == s["metadata"]["name"]), None)
        assert service, f"{c['name']}: {host} is none of the head's Services"
        assert re.fullmatch(re.escape(service["metadata"]["name"])
                            + r"(\.[a-z0-9$()_-]+(\.svc(\.[a-z0-9.-]+)?)?)?", host), host
        ports = {p["port"]: p for p in service["spec"]["ports"]}
        assert int(port) in ports, f"{c['name']}: the Service has no port {port}"
        target = ports[int(port)].get("targetPort", int(port))
        declared = {p["name"]: p["containerPort"] for p in head_container["ports"]}
        assert declared.get(target, target) == gcs_port, f"port {port} does not reach the GCS"


def test_every_node_stays_in_the_foreground():
    for w in workloads():
        for c in containers(w):
            assert c.get("command", ["phalanx"]) == ["phalanx"], c["command"]
            assert c["args"][0] == "start" and "--block" in c["args"], c["args"]


def test_the_command_lines_use_only_flags_that_phalanx_start_lists():
    listed = listed_flags(phalanx_help("start"))
    assert "--head" in listed and "--address" in listed, "could not read `phalanx start --help`"
    for w in workloads():
        for c in containers(w):
            used = {a.split("=", 1)[0] for a in c["args"] if str(a).startswith("--")}
            missing = sorted(used - listed)
            assert not missing, f"{c['name']}: `phalanx start --help` does not list {missing}"


def test_phalanx_has_make_ca_for_the_secret():
    assert re.search(r"^\s+make-ca\s", phalanx_help(), re.M), "`phalanx --help` lists no make-ca"


def dockerfile_instructions():
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    with open(DOCKERFILE) as f:
        lines = [line for line in f.read().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_image_is_debian_12_with_the_phalanx_deb_and_phalanx_as_entrypoint():
    instructions = dockerfile_instructions()
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert froms and re.match(r"debian:12(\b|-)", froms[0]), froms
    args = {rest.split("=")[0] for word, rest in instructions if word == "ARG"}
    copies = [shlex.split(rest) for word, rest in instructions if word == "COPY"]
    deb = [c for c in copies if any(re.search(r"phalanx_\*.*\.deb$", s) for s in c[:-1])]
    assert deb, f"no COPY of phalanx_*.deb: {copies}"
    assert any(re.search(r"\$\{?(\w+)", s) and re.search(r"\$\{?(\w+)", s).group(1) in args
               for s in deb[0][:-1]), "the .deb's directory is not an ARG"
    runs = [rest for word, rest in instructions if word == "RUN"]
    assert any(re.search(r"apt-get install -y\b.*\./phalanx_\*\S*\.deb", r) for r in runs), \
        "no `apt-get install -y ./phalanx_*.deb` (Debian resolves the package's Depends)"
    entrypoints = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["phalanx"], entrypoints
