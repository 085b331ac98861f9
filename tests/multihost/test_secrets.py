"""Issue 49, secrets: on 3 hosts whose session roots were made by `mkdir -p` (0755, as a
umask of 022 makes them), with a node joined by `phalanx start --block --token T` (the token
on its command line, as containers and srun start nodes) and a driver job whose log prints
the token, another user (nobody) reads every process's command line and tries every file
under every session root: the token is in none of them, and nothing under a session root can
be read. The session roots are tightened to 0700, and every directory Phalanx makes under
them is 0700 and every file 0600 (Redis's own files included)."""

import os
import stat
import subprocess
import time

import pytest

import netns
from netns import bin_dir

NOBODY = 65534


def as_nobody(fn):
    """Runs fn() in a child process as uid/gid 65534; returns what it returned (a list)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = repr(fn()).encode()
            os.write(w, out)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return eval(data.decode()) if data else None  # noqa: S307 (our own child's repr)


def what_nobody_reads(roots, token):
    """(files read, files holding the token, command lines holding the token)."""
    read, leaks, cmdlines = [], [], []
    for root in roots:
        for d, dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(d, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 20)
                except OSError:
                    continue
                read.append(path)
                if token.encode() in data:
                    leaks.append(path)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if token.encode() in cmd:
            cmdlines.append((int(pid), cmd.replace(b"\0", b" ").decode(errors="replace")))
    return read, leaks, cmdlines


def test_no_other_user_reads_the_token_or_a_session_file(hosts):
    if os.geteuid() != 0:
        pytest.skip("needs root, to read as another user")
    # Session roots as `mkdir -p` makes them under umask 022, with a path nobody can walk.
    for h in hosts:
        os.chmod(h.tmpdir, 0o755)
    p = hosts[0].tmpdir
    while p != os.path.dirname(netns._run_dir_root()):
        os.chmod(p, os.stat(p).st_mode | 0o055)
        p = os.path.dirname(p)
    cluster = netns.Cluster(hosts, num_cpus=2, node_timeout_ms=2000, heartbeat_ms=250)
    blocked = None
    try:
        cluster.start()
        token = cluster.token
        assert token and len(token) >= 16
        # Host 2's node again, the way containers and srun start one: --block, the token on
        # the command line.
        r = cluster.phalanx(2, "stop", timeout=60)
        assert r.returncode == 0, r.stderr
        blocked = hosts[2].spawn(
            [os.path.join(bin_dir(), "phalanx"), "start", "--address", cluster.address,
             "--token", token, *cluster.join_args, "--node-ip-address", hosts[2].ip,
             "--num-cpus", "2", "--heartbeat-ms", "250", "--block"],
            log=os.path.join(hosts.dir, "blocked.log"))
        assert cluster.wait_alive(3, 30), cluster.status()[1].stdout
        # A driver job whose log holds the token.
        r = cluster.phalanx(0, "job", "submit", "--", "sh", "-c", 'echo "token=$PHALANX_TOKEN"',
                            timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert token in r.stdout, "the driver did not see its token: nothing to leak"

        read, leaks, cmdlines = as_nobody(
            lambda: what_nobody_reads([h.tmpdir for h in hosts], token))
        print(f"\n[secrets] nobody read {len(read)} session files; {len(leaks)} hold the token; "
              f"{len(cmdlines)} command lines hold it")
        assert not cmdlines, f"the token is on a command line: {cmdlines}"
        assert not leaks, f"files another user reads hold the token: {leaks}"
        assert not read, f"another user reads session files: {read[:20]}"

        # Modes, whatever the umask or the root's: 0700 directories, 0600 files.
        loose = []
        for h in hosts:
            if stat.S_IMODE(os.stat(h.tmpdir).st_mode) != 0o700:
                loose.append((h.tmpdir, oct(os.stat(h.tmpdir).st_mode)))
            for d, dirs, files in os.walk(h.tmpdir):
                for name in dirs + files:
                    path = os.path.join(d, name)
                    st = os.lstat(path)
                    if stat.S_ISLNK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                        continue
                    want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
                    if stat.S_IMODE(st.st_mode) & ~want:
                        loose.append((path, oct(stat.S_IMODE(st.st_mode))))
        assert not loose, f"{len(loose)} paths open to others: {loose[:20]}"
    finally:
        left = cluster.stop()
        if blocked is not None:
            try:
                blocked.wait(timeout=20)
            except subprocess.TimeoutExpired:
                blocked.kill()
        if left:
            pytest.fail(f"processes left after `phalanx stop` on every host: {left}",
                        pytrace=False)
