# Ray Core's namespaces with only the import changed: jobs (separate driver processes here)
# in a named namespace see each other's named actors; jobs without one each get an
# anonymous namespace of their own, so both may name an actor "my_actor". As on Ray's page,
# the jobs join a cluster this machine runs (`phalanx start --head` first).
import subprocess
import sys
import textwrap

import phalanx as ray

ray.init(address="auto")


def job(code):
    """Runs `code` as a driver of its own on this cluster; its printed lines."""
    src = "import phalanx as ray\n@ray.remote\nclass Actor:\n    pass\n" + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


job('''
    ray.init(address="auto", namespace="colors")
    Actor.options(name="orange", lifetime="detached").remote()
''')
assert job('''
    ray.init(address="auto", namespace="fruits")
    try:
        ray.get_actor("orange")
        print("visible")
    except ValueError:
        print("absent")
''') == ["absent"]
assert job('''
    ray.init(address="auto", namespace="colors")
    ray.get_actor("orange")
    print(ray.get_runtime_context().namespace)
''') == ["colors"]
anonymous = [job('''
    ray.init(address="auto")
    Actor.options(name="my_actor", lifetime="detached").remote()
    print(ray.get_runtime_context().namespace)
''')[0] for _ in range(2)]
assert anonymous[0] != anonymous[1], anonymous
assert ray.get_runtime_context().namespace not in anonymous
# This driver sees them in their namespaces only; detached, they are killed by hand.
for name, namespace in [("orange", "colors")] + [("my_actor", ns) for ns in anonymous]:
    ray.kill(ray.get_actor(name, namespace=namespace))
try:
    ray.get_actor("my_actor")
    raise AssertionError("another job's anonymous namespace was visible")
except ValueError:
    pass
print("OK")
