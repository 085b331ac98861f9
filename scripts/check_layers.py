#!/usr/bin/env python3
"""Checks that every project #include follows Phalanx's layers.

The layers, bottom to top (the same list opens the top-level CMakeLists.txt). Every layer of
the library is one top-level folder; the programs and the tests are leaves, several folders
that never include one another:

    base          base (ids, files, processes, metrics; base/proto; gRPC helpers, TLS)
    client        client (the GCS client every process uses; a job's record as people read it)
    placement     placement
    gcs           gcs (the GCS server)
    node          node
    worker        worker
    collectives   collectives
    actors        actors, with actors/internal (the public C++ API and its machinery)
    elastic       elastic
    programs      cli, examples, python, sdk
    tests         tests, bench, fuzz

A folder may include its own headers and those of the folders ALLOWED lists for it (below),
and a contract (a public header such as actors/api.h) only its own machinery (CONTRACTS):
never a folder of a higher layer, at most the layers below its own, and another folder of its
own layer only where listed. Only project includes are checked: `#include "folder/..."` (or
<folder/...>) where folder is one of the project's top-level folders; Abseil, gRPC, the
standard library and a folder's own local headers ("half.h") are not.

    scripts/check_layers.py              check this checkout; exit 0 when clean, 1 otherwise
    scripts/check_layers.py --root DIR   check another tree laid out the same way
    scripts/check_layers.py --self-test  plant bad includes in a temporary tree and check
                                         that each is caught (and the good ones are not)
    scripts/check_layers.py --graph      draw the includes as arrows between folders, bottom
                                         layer first, and count those that go up a layer; and
                                         find import cycles in the phalanx Python package
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

LAYERS = [
    ("base", ["base"]),
    ("client", ["client"]),
    ("placement", ["placement"]),
    ("gcs", ["gcs"]),
    ("node", ["node"]),
    ("worker", ["worker"]),
    ("collectives", ["collectives"]),
    ("actors", ["actors", "actors/internal"]),
    ("elastic", ["elastic"]),
    ("programs", ["cli", "examples", "python", "sdk"]),
    ("tests", ["tests", "bench", "fuzz"]),
]


def below(folder):
    """Every folder of the layers under folder's layer."""
    rank = next(i for i, (_, folders) in enumerate(LAYERS) if folder in folders)
    return [f for _, folders in LAYERS[:rank] for f in folders]


# The allow-list: folder -> the folders its files may include besides its own. An entry never
# reaches above its folder's layer (checked at start-up); it may reach less far, and a folder
# uses another of its own layer only where listed here.
ALLOWED = {
    "base": [],
    "client": ["base"],
    "placement": ["base"],  # a pure library: no RPC client, no server
    "gcs": below("gcs"),
    # A node and a worker reach the cluster through the client; neither knows the other's
    # folder nor the GCS server's.
    "node": ["base", "client", "placement"],
    "worker": ["base", "client", "placement"],
    "collectives": ["base", "client", "worker"],
    # The actor API and the machinery behind it (templates, registration, macros).
    "actors": below("actors") + ["actors/internal"],
    "actors/internal": below("actors"),
    # Elastic training is written on the actor API; nothing below it knows of it. Its job
    # kind plugs into the GCS server (gcs/job_kind.h), so it may include gcs/ as well.
    "elastic": below("elastic"),
    # The commands. `phalanx` is a client of the GCS: it reads and writes its tables and
    # links no actor runtime (`phalanx start` checks a Redis store itself: gcs/store.h).
    # phalanx-gcs's main (gcs_main.cc) is where the GCS server is handed the elastic job kind
    # (elastic/job_kind.h), so that gcs/ never includes elastic/.
    "cli": ["base", "client", "gcs", "elastic"],
    "examples": below("examples"),
    "sdk": [],  # one file that includes nothing; the library is the archives below, whole
    "python": below("python"),
    "tests": below("tests"),
    "bench": below("bench") + ["tests"],  # benchmarks reuse the test helpers (tests/testing)
    "fuzz": below("fuzz"),  # libFuzzer targets (scripts/fuzz.sh)
}

# Contracts: public headers that may include, of the project, only the folders or headers
# listed (their own machinery, and the vocabulary types other public headers share),
# whatever their folder's layer allows: a user's program that includes one sees no runtime
# type in it.
CONTRACTS = {
    "actors/api.h": ["actors/internal", "base/typed_id.h"],
    "actors/internal/actor_options.h": [],
}

# Code we do not own and output of builds: never checked. Every other folder with C++ in it
# must be in LAYERS.
SKIP_DIRS = {"third_party", "__pycache__"}
SKIP_TOP = re.compile(r"^(\..*|build(-.*)?|Testing)$")
SOURCE_EXTS = (".h", ".hh", ".hpp", ".inc", ".cc", ".cpp", ".cxx", ".c")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

RANK = {folder: i for i, (_, folders) in enumerate(LAYERS) for folder in folders}
LAYER_NAME = {folder: name for name, folders in LAYERS for folder in folders}
TOP = {folder.split("/")[0] for folder in RANK}


def folder_of(path):
    """The layer folder a repo-relative path belongs to (longest match), or None."""
    best = None
    for folder in RANK:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def allowed(src, dst):
    """Whether a file of folder src may include a header of folder dst."""
    return src == dst or dst in ALLOWED[src]


def project_files(root):
    """Every C++ file of the tree, as a repo-relative path."""
    for top in sorted(os.listdir(root)):
        if SKIP_TOP.match(top) or not os.path.isdir(os.path.join(root, top)):
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXTS):
                    yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def violation(rel, lineno, text, rule, fix):
    return f"{rel}:{lineno}: {text}\n  rule: {rule}\n  fix:  {fix}"


def check(root):
    """Returns (number of files, number of project includes, list of violation messages)."""
    problems, nfiles, nincludes = [], 0, 0
    for rel in project_files(root):
        nfiles += 1
        src = folder_of(rel)
        if src is None:
            problems.append(violation(
                rel, 1, "(file)", f"{os.path.dirname(rel)}/ is in no layer",
                "add its folder to LAYERS in scripts/check_layers.py and to the layer list "
                "in CMakeLists.txt, at the layer it belongs to"))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for lineno, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m or m.group(2).split("/")[0] not in TOP or "/" not in m.group(2):
                continue
            header = m.group(2)
            text = line.strip()
            nincludes += 1
            dst = folder_of(header)
            if dst is None:
                problems.append(violation(
                    rel, lineno, text, f"{header} is in no folder of the layer list",
                    "include a header of a listed folder, or add its folder to LAYERS in "
                    "scripts/check_layers.py"))
                continue
            if rel in CONTRACTS and dst not in CONTRACTS[rel] and header not in CONTRACTS[rel]:
                problems.append(violation(
                    rel, lineno, text,
                    f"{rel} is a contract (CONTRACTS in scripts/check_layers.py): it may "
                    f"include only {', '.join(CONTRACTS[rel]) or 'no project header'}",
                    f"declare what it needs from {header} here (a forward declaration, or a "
                    f"function of the API defined in a .cc), or include it from "
                    f"actors/internal/api_inl.h, the machinery it includes last"))
                continue
            if allowed(src, dst):
                continue
            may = ", ".join([src] + ALLOWED[src])
            if RANK[dst] > RANK[src]:
                rule = (f"{src}/ (layer '{LAYER_NAME[src]}') may not include {dst}/ (layer "
                        f"'{LAYER_NAME[dst]}', above it): a layer uses only layers below it")
                fix = (f"move what {src}/ needs from {header} into a folder {src}/ may "
                       f"include ({may}), or let {dst}/ hand it in through an interface "
                       f"that {src}/ defines, wired up in a program's main in cli/ (as "
                       "cli/gcs_main.cc hands the GCS its elastic job kind)")
            else:
                rule = (f"{src}/ may include only {may} (ALLOWED in scripts/check_layers.py), "
                        f"not {dst}/")
                fix = (f"use what the folders {src}/ may include offer, or move the part it "
                       f"needs from {header} down into one of them; widen ALLOWED only if "
                       f"{src}/ is meant to depend on {dst}/")
            problems.append(violation(rel, lineno, text, rule, fix))
    return nfiles, nincludes, problems


def graph(root):
    """The includes drawn as folder -> folder arrows (with how many includes each carries),
    from the code alone: returns the lines to print and the number of arrows going up."""
    edges = {}
    for rel in project_files(root):
        src = folder_of(rel)
        if src is None:
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = INCLUDE_RE.match(line)
                if not m or m.group(2).split("/")[0] not in TOP or "/" not in m.group(2):
                    continue
                dst = folder_of(m.group(2))
                if dst is not None and dst != src:
                    edges[(src, dst)] = edges.get((src, dst), 0) + 1
    lines, up = [], 0
    for src in sorted({s for s, _ in edges}, key=lambda f: (RANK[f], f)):
        outs = sorted(((d, n) for (s, d), n in edges.items() if s == src),
                      key=lambda e: (RANK[e[0]], e[0]))
        marks = []
        for dst, n in outs:
            going_up = RANK[dst] > RANK[src]
            up += going_up
            marks.append(f"{dst} ({n}){' UP' if going_up else ''}")
        lines.append(f"{src:16} -> {', '.join(marks)}")
    return lines, up


def python_modules(root, package="python/phalanx"):
    """Every module of the Python package: dotted name -> file."""
    base = os.path.join(root, package)
    top = os.path.basename(package)
    modules = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in filenames:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), base)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            modules[".".join([top] + rel)] = os.path.join(dirpath, name)
    return modules


def python_imports(modules):
    """module -> the package's modules it imports, anywhere in it (a function's import too:
    a cycle closed at call time is still a cycle)."""
    import ast
    edges = {}
    for name, path in modules.items():
        is_package = path.endswith("__init__.py")
        package = name if is_package else name.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                where = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - node.level + 1]
                    where = ".".join(parts + ([where] if where else []))
                for a in node.names:  # `from . import x` imports the module x
                    found.add(f"{where}.{a.name}" if f"{where}.{a.name}" in modules else where)
        # Importing a module runs its package's __init__ first, which is not an edge of its
        # own making: a package that imports its submodules is no cycle.
        edges[name] = {m for m in found if m in modules and m != name
                       and not name.startswith(m + ".")}
    return edges


def import_cycles(edges):
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_rules():
    """The table itself: ALLOWED covers every folder and never points up a layer."""
    assert set(ALLOWED) == set(RANK), f"ALLOWED and LAYERS differ: {set(ALLOWED) ^ set(RANK)}"
    for src, dsts in ALLOWED.items():
        for dst in dsts:
            assert RANK[dst] <= RANK[src], f"ALLOWED {src} -> {dst} points up a layer"


def self_test():
    """Plants good and bad includes in a temporary tree; each bad one must be reported."""
    files = {
        # Clean: own folder, a lower layer, a third-party header, a local header.
        "base/ids.h": '#include "absl/status/status.h"\n',
        "gcs/table.h": '#include "gcs/store.h"\n#include "placement/view.h"\n#include "x.h"\n',
        "elastic/policy.h": '#include "actors/api.h"\n#include <base/rpc.h>\n',
        "tests/gcs/t.cc": '#include "elastic/policy.h"\n',
        "cli/gcs_main.cc": '#include "elastic/job_kind.h"\n#include "gcs/gcs_server.h"\n',
        "collectives/third_party/vendored.h": '#include "actors/api.h"\n',
        # Bad: upward, sideways within a layer, a server's main wiring a higher layer in from
        # its own folder, a file in an unknown folder, a lower folder that is not in the
        # allow-list, a contract including the runtime.
        "placement/bad_up.cc": '// fine\n#include "client/gcs_client.h"\n',
        "node/bad_side.cc": '#include "worker/core_worker.h"\n',
        "gcs/job_manager.cc": '#include "elastic/job_kind.h"\n',
        "gcs/other_main.cc": '#  include <elastic/job_kind.h>\n',
        "cli/job.cc": '#include "client/gcs_client.h"\n#include "actors/api.h"\n',
        "base/bad_up2.h": '#include "tests/testing/test_util.h"\n',
        "newmod/x.cc": '#include "client/gcs_client.h"\n',
        "actors/api.cc": '#include "actors/api.h"\n#include "elastic/controller.h"\n',
        "actors/api.h": '#include "actors/internal/api_inl.h"\n#include "worker/errors.h"\n',
        "build-tsa/gen.pb.cc": '#include "tests/x.h"\n',  # build output: not checked
    }
    expected = {
        "placement/bad_up.cc:2:", "node/bad_side.cc:1:", "gcs/job_manager.cc:1:",
        "gcs/other_main.cc:1:", "base/bad_up2.h:1:",
        "cli/job.cc:2:", "newmod/x.cc:1:", "actors/api.cc:2:", "actors/api.h:2:",
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        run = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root],
                             capture_output=True, text=True)
        reported = set(re.findall(r"^(\S+:\d+:) ", run.stdout, re.M))
        ok = run.returncode == 1 and reported == expected and "rule:" in run.stdout \
            and "fix:" in run.stdout
        # And a clean tree passes.
        for rel in list(files):
            if any(rel + ":" in e for e in expected):
                os.remove(os.path.join(root, rel))
        clean = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root],
                               capture_output=True, text=True)
        ok = ok and clean.returncode == 0
    if not ok:
        print("check_layers self-test FAILED")
        print(f"expected exit 1 with {sorted(expected)}; got exit {run.returncode} with "
              f"{sorted(reported)}:\n{run.stdout}{run.stderr}")
        print(f"clean tree: exit {clean.returncode}\n{clean.stdout}{clean.stderr}")
        return 1
    print(f"check_layers self-test: {len(expected)} planted bad includes caught, clean tree "
          "passes")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("--graph", action="store_true")
    args = parser.parse_args()
    check_rules()
    if args.self_test:
        return self_test()
    if args.graph:
        lines, up = graph(args.root)
        print("\n".join(lines))
        modules = python_modules(args.root)
        cycles = import_cycles(python_imports(modules))
        for group in cycles:
            print(f"import cycle: {' <-> '.join(group)}")
        print(f"check_layers --graph: {len(lines)} folders, {up} arrow(s) going up a layer; "
              f"{len(modules)} Python modules, {len(cycles)} import cycle(s)")
        return 1 if up or cycles else 0
    nfiles, nincludes, problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layers "
              f"({nfiles} files checked); the layers are listed in scripts/check_layers.py")
        return 1
    print(f"check_layers: {nfiles} files, {nincludes} project includes, all follow the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
