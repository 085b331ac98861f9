#!/usr/bin/env python3
"""Checks that every project #include follows Phalanx's layers.

The layers, bottom to top (the same list opens the top-level CMakeLists.txt):

    ground        runtime/common, runtime/proto, runtime/rpc
    placement     placement
    gcs           gcs
    runtime       runtime/node, runtime/worker
    collectives   collectives
    actors        actors, actors/internal
    elastic       actors/elastic
    programs      runtime/cli, examples, python, sdk
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
"""

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tempfile

LAYERS = [
    ("ground", ["runtime/common", "runtime/proto", "runtime/rpc"]),
    ("placement", ["placement"]),
    ("gcs", ["gcs"]),
    ("runtime", ["runtime/node", "runtime/worker"]),
    ("collectives", ["collectives"]),
    ("actors", ["actors", "actors/internal"]),
    ("elastic", ["actors/elastic"]),
    ("programs", ["runtime/cli", "examples", "python", "sdk"]),
    ("tests", ["tests", "bench", "fuzz"]),
]


def below(folder):
    """Every folder of the layers under folder's layer."""
    rank = next(i for i, (_, folders) in enumerate(LAYERS) if folder in folders)
    return [f for _, folders in LAYERS[:rank] for f in folders]


GROUND = LAYERS[0][1]

# The allow-list: folder -> the folders its files may include besides its own. An entry never
# reaches above its folder's layer (checked at start-up); it may reach less far, and a folder
# uses another of its own layer only where listed here.
ALLOWED = {
    "runtime/common": [],
    "runtime/proto": [],
    "runtime/rpc": ["runtime/common", "runtime/proto"],  # RPC helpers over generated code
    "placement": GROUND,
    "gcs": below("gcs"),
    "runtime/node": below("runtime/node"),
    "runtime/worker": below("runtime/worker"),
    "collectives": below("collectives"),
    # The actor API and the machinery behind it (templates, registration, macros).
    "actors": below("actors") + ["actors/internal"],
    "actors/internal": below("actors"),
    # Elastic training is written on the actor API; nothing below it knows of it.
    "actors/elastic": below("actors/elastic"),
    # The `phalanx` command is a client of the GCS: it reads and writes its tables and links
    # no actor runtime. What it shows of an elastic job comes from the job's GCS record.
    "runtime/cli": GROUND + ["gcs"],
    "examples": below("examples"),
    "sdk": [],  # one file that includes nothing; the library is the archives below, whole
    "python": below("python"),
    "tests": below("tests"),
    "bench": below("bench") + ["tests"],  # benchmarks reuse the test helpers (tests/testing)
    "fuzz": below("fuzz"),  # libFuzzer targets (scripts/fuzz.sh)
}

# Composition roots: a program's main may wire a higher layer's part into a lower layer's
# server, since nothing links against a main. Each entry is one *_main.cc and the exact
# headers it may include against the layers. Keep this list short: anything a library needs
# belongs in its own layer or below.
COMPOSITION_ROOTS = {
    # The GCS server learns the elastic job kind from the actors layer at start-up, so that
    # gcs/ itself never includes actors/.
    "gcs/gcs_server_main.cc": ["actors/elastic/job_kind.h"],
}

# Contracts: public headers that may include, of the project, only the folders listed (their
# own machinery), whatever their folder's layer allows: a user's program that includes one
# sees no runtime type in it.
CONTRACTS = {
    "actors/api.h": ["actors/internal"],
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
            if rel in CONTRACTS and dst not in CONTRACTS[rel]:
                problems.append(violation(
                    rel, lineno, text,
                    f"{rel} is a contract (CONTRACTS in scripts/check_layers.py): it may "
                    f"include only {', '.join(CONTRACTS[rel]) or 'no project header'}",
                    f"declare what it needs from {header} here (a forward declaration, or a "
                    f"function of the API defined in a .cc), or include it from "
                    f"actors/internal/api_inl.h, the machinery it includes last"))
                continue
            if allowed(src, dst) or header in COMPOSITION_ROOTS.get(rel, []):
                continue
            may = ", ".join([src] + ALLOWED[src])
            if RANK[dst] > RANK[src]:
                rule = (f"{src}/ (layer '{LAYER_NAME[src]}') may not include {dst}/ (layer "
                        f"'{LAYER_NAME[dst]}', above it): a layer uses only layers below it")
                fix = (f"move what {src}/ needs from {header} into a folder {src}/ may "
                       f"include ({may}), or let {dst}/ hand it in through an interface "
                       f"that {src}/ defines, wired up in a program's main (a composition "
                       "root: COMPOSITION_ROOTS in scripts/check_layers.py)")
            else:
                rule = (f"{src}/ may include only {may} (ALLOWED in scripts/check_layers.py), "
                        f"not {dst}/")
                fix = (f"use what the folders {src}/ may include offer, or move the part it "
                       f"needs from {header} down into one of them; widen ALLOWED only if "
                       f"{src}/ is meant to depend on {dst}/")
            problems.append(violation(rel, lineno, text, rule, fix))
    return nfiles, nincludes, problems


def check_rules():
    """The tables themselves: ALLOWED covers every folder and never points up a layer; every
    composition root is a *_main.cc of a known folder."""
    assert set(ALLOWED) == set(RANK), f"ALLOWED and LAYERS differ: {set(ALLOWED) ^ set(RANK)}"
    for src, dsts in ALLOWED.items():
        for dst in dsts:
            assert RANK[dst] <= RANK[src], f"ALLOWED {src} -> {dst} points up a layer"
    for main, headers in COMPOSITION_ROOTS.items():
        assert fnmatch.fnmatch(main, "*_main.cc"), f"{main}: only *_main.cc files are roots"
        assert folder_of(main) and all(folder_of(h) for h in headers), main


def self_test():
    """Plants good and bad includes in a temporary tree; each bad one must be reported."""
    files = {
        # Clean: own folder, a lower layer, a third-party header, a local header.
        "runtime/common/ids.h": '#include "absl/status/status.h"\n',
        "gcs/table.h": '#include "gcs/store.h"\n#include "placement/view.h"\n#include "x.h"\n',
        "actors/elastic/policy.h": '#include "actors/api.h"\n#include <runtime/rpc/rpc.h>\n',
        "tests/gcs/t.cc": '#include "actors/elastic/policy.h"\n',
        "gcs/gcs_server_main.cc": '#include "actors/elastic/job_kind.h"\n',
        "collectives/third_party/vendored.h": '#include "actors/api.h"\n',
        # Bad: upward, sideways within a layer, a root's header outside its exception, a
        # non-root file including the root's header, an unknown folder (included, and a file
        # in one), a lower folder that is not in the allow-list.
        "placement/bad_up.cc": '// fine\n#include "gcs/gcs_client.h"\n',
        "runtime/node/bad_side.cc": '#include "runtime/worker/core_worker.h"\n',
        "gcs/job_manager.cc": '#include "actors/elastic/job_kind.h"\n',
        "gcs/other_main.cc": '#  include <actors/elastic/job_kind.h>\n',
        "runtime/common/bad_up2.h": '#include "tests/testing/test_util.h"\n',
        "gcs/unknown.cc": '#include "runtime/nowhere/x.h"\n',
        "runtime/cli/job.cc": '#include "gcs/gcs_client.h"\n#include "actors/elastic/spec.h"\n',
        "newmod/x.cc": '#include "gcs/gcs_client.h"\n',
        "actors/api.cc": '#include "actors/api.h"\n#include "actors/elastic/controller.h"\n',
        "actors/api.h": '#include "actors/internal/api_inl.h"\n#include "runtime/worker/errors.h"\n',
        "build-tsa/gen.pb.cc": '#include "tests/x.h"\n',  # build output: not checked
    }
    expected = {
        "placement/bad_up.cc:2:", "runtime/node/bad_side.cc:1:", "gcs/job_manager.cc:1:",
        "gcs/other_main.cc:1:", "runtime/common/bad_up2.h:1:", "gcs/unknown.cc:1:",
        "runtime/cli/job.cc:2:", "newmod/x.cc:1:", "actors/api.cc:2:", "actors/api.h:2:",
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
    args = parser.parse_args()
    check_rules()
    if args.self_test:
        return self_test()
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
