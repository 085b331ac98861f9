"""The installable C++ SDK, used as a user outside this tree would: `cmake --install` into a
temporary prefix, the out-of-tree project examples/cpp/standalone built against it with
find_package(Phalanx) (and once with pkg-config), and run on a cluster started from the
installed binaries; then the Debian package (CPack): its Depends, and the same project built
against the package's unpacked contents.

Run from the repository root after the build: /usr/bin/python3 -m pytest tests/sdk
"""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build")
EXAMPLE = os.path.join(ROOT, "examples", "cpp", "standalone")
# Bounds: installing, configuring and building the example, running it, making the package.
INSTALL_TIMEOUT_S = 120
BUILD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 180
CPACK_TIMEOUT_S = 300


def run(cmd, timeout, env=None, cwd=None):
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def clean_env(tmp):
    """No trace of the build tree: PATH without build/bin, no PYTHONPATH, a session root of
    this test's own."""
    env = dict(os.environ, PHALANX_TMPDIR=str(tmp / "sessions"),
               PATH="/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin")
    for name in ("PYTHONPATH", "PHALANX_ADDRESS", "PHALANX_TOKEN", "PHALANX_TLS_DIR",
                 "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH"):
        env.pop(name, None)
    os.makedirs(env["PHALANX_TMPDIR"], mode=0o700, exist_ok=True)
    return env


@pytest.fixture
def prefix(tmp_path):
    if not os.path.exists(os.path.join(BUILD, "lib", "libphalanx.so")):
        pytest.skip("build/lib/libphalanx.so is not built: run scripts/setup.sh first")
    p = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", str(p)], INSTALL_TIMEOUT_S)
    yield p


@pytest.fixture
def cluster_from(tmp_path):
    """Starts a head from a prefix's bin/phalanx; stops it (and checks) at the end."""
    started = []

    def start(bin_dir, env):
        run([os.path.join(bin_dir, "phalanx"), "start", "--head", "--port", str(free_port()),
             "--node-ip-address", "127.0.0.1", "--num-cpus", "4", "--dashboard-port", "-1"],
            60, env=env)
        started.append((bin_dir, env))
    yield start
    for bin_dir, env in started:
        subprocess.run([os.path.join(bin_dir, "phalanx"), "stop", "--grace", "3"], env=env,
                       capture_output=True, timeout=60)
        sessions = env["PHALANX_TMPDIR"]
        left = subprocess.run(["pgrep", "-f", sessions], capture_output=True, text=True).stdout
        for pid in left.split():
            subprocess.run(["kill", "-9", pid])
        assert not left, f"processes of {sessions} outlived phalanx stop: {left}"


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_example(prefix_path, build_dir, env):
    run(["cmake", "-S", EXAMPLE, "-B", str(build_dir), "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={prefix_path}"], BUILD_TIMEOUT_S, env=env)
    run(["cmake", "--build", str(build_dir)], BUILD_TIMEOUT_S, env=env)
    return os.path.join(build_dir, "standalone")


def test_the_installed_sdk_builds_and_runs_a_project_of_its_own(prefix, cluster_from, tmp_path):
    env = clean_env(tmp_path)
    for f in ("bin/phalanx", "bin/phalanx-gcs", "bin/phalanx-node", "lib/libphalanx.so",
              "lib/cmake/Phalanx/PhalanxConfig.cmake", "lib/pkgconfig/phalanx.pc",
              "include/phalanx/actors/api.h"):
        assert (prefix / f).exists(), f
    program = build_example(prefix, tmp_path / "standalone", env)
    linked = run(["ldd", program], 30)
    assert str(prefix / "lib" / "libphalanx.so") in linked, linked
    # pkg-config as well: a plain compiler command line.
    pc_env = dict(env, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "phalanx"], 30, env=pc_env).split()
    run(["g++", "-o", str(tmp_path / "standalone_pc"), os.path.join(EXAMPLE, "main.cc"), *flags],
        BUILD_TIMEOUT_S, env=env)

    cluster_from(str(prefix / "bin"), env)
    out = run([program], RUN_TIMEOUT_S, env=env)
    assert "actor + tasks: 1 + cube(cube(2)) = 513" in out, out
    assert "SUCCEEDED after 60 steps on 2 ranks" in out, out


def test_the_debian_package_holds_the_sdk_and_names_its_debian_dependencies(tmp_path):
    if shutil.which("cpack") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("cpack or dpkg-deb is missing (apt-get install cmake dpkg-dev)")
    if not os.path.exists(os.path.join(BUILD, "lib", "libphalanx.so")):
        pytest.skip("build/lib/libphalanx.so is not built: run scripts/setup.sh first")
    out_dir = tmp_path / "deb"
    run(["cpack", "-G", "DEB", "-B", str(out_dir)], CPACK_TIMEOUT_S, cwd=BUILD)
    debs = sorted(p for p in os.listdir(out_dir) if p.endswith(".deb"))
    assert len(debs) == 1 and debs[0].startswith("phalanx_") and debs[0].endswith("_amd64.deb")
    deb = str(out_dir / debs[0])
    depends = run(["dpkg-deb", "-f", deb, "Depends"], 30)
    for package in ("redis-server", "libgrpc++1.51", "libprotobuf32", "libabsl20220623",
                    "libhiredis0.14", "libboost-fiber1.74.0", "libgloo0", "libabsl-dev",
                    "libmsgpack-cxx-dev"):
        assert package in depends, depends
    # Every dependency is a package Debian has (apt knows it).
    names = [d.strip().split()[0] for d in depends.split(",")]
    missing = [n for n in names
               if subprocess.run(["apt-cache", "show", n], capture_output=True).returncode]
    assert not missing, f"not Debian packages: {missing}"
    root = tmp_path / "root"
    run(["dpkg-deb", "-x", deb, str(root)], 120)
    for f in ("usr/bin/phalanx", "usr/lib/libphalanx.so", "usr/include/phalanx/actors/api.h",
              "usr/lib/cmake/Phalanx/PhalanxConfig.cmake",
              "usr/lib/python3/dist-packages/phalanx/__init__.py"):
        assert (root / f).exists(), f
    # The native module inside the package, as phalanx._native.
    assert list((root / "usr/lib/python3/dist-packages/phalanx").glob("_native.*.so"))
    env = clean_env(tmp_path)
    program = build_example(root / "usr", tmp_path / "standalone-deb", env)
    assert os.access(program, os.X_OK)
