"""Ray's DAG API (``ray.dag``): a graph of task and actor calls, built with ``.bind()`` and run
with ``.execute()``.

    with InputNode() as inp:
        a = double.bind(inp)                 # a FunctionNode: nothing runs yet
        dag = add.bind(a, plus_one.bind(inp))
    phalanx.get(dag.execute(2))              # runs double, plus_one and add: 7
    phalanx.get(dag.execute(3))              # and again, on another input: 10

What ``execute`` promises, as Ray's does:
- Each node of the graph is submitted once per execute, upstream nodes first; a node two
  others use runs once, and both get its ObjectRef.
- An upstream node's ObjectRef given as a top-level argument reaches the call as its value;
  one inside a list, tuple or dict stays an ObjectRef there (as any ref does).
- ``Cls.bind(...)`` (a ClassNode) creates its actor anew on each execute; its method nodes
  (``node.method.bind(...)``) call that actor in the order they were bound. The actor ends
  once that execute's calls on it are done, as Ray's does when its handle goes out of scope,
  unless the execute gave its handle away (the ClassNode is the DAG's result, or an argument
  of another node). ``handle.method.bind(...)`` calls a live actor, which the DAG leaves be:
  the way to keep an actor's state from one execute to the next.
- Errors of the graph's shape (an InputNode without inputs, two InputNodes) raise from
  ``execute``; a node's own exception raises where Ray raises it, at ``get`` of its ref.

Not here: Ray's compiled graphs (``experimental_compile``) and its visualisation.
"""

import threading
import time

from ._api import (ActorClass, ActorHandle, ActorMethod, ObjectRef, _method_returns,
                   is_initialized, kill)

__all__ = ["DAGNode", "InputNode", "InputAttributeNode", "FunctionNode", "ClassNode",
           "ClassMethodNode", "MultiOutputNode", "DAGInputData"]

# How often the actors of finished executes are checked, to end those whose calls are done.
REAP_POLL_S = 0.2


class DAGNode:
    """A node of a DAG: a call (or an input) with its bound arguments, in which other nodes
    may stand, nested in lists, tuples and dicts too. ``execute(*args, **kwargs)`` runs the
    graph that ends at this node and gives what the node gives (see each subclass). Several
    threads may execute one DAG at once; binding the methods of one ClassNode from several
    threads makes the order of its calls theirs."""

    def __init__(self, args=(), kwargs=None, options=None):
        self._bound_args = tuple(args)
        self._bound_kwargs = dict(kwargs or {})
        self._bound_options = dict(options or {})

    def get_args(self):
        """The arguments bound to this node (a tuple)."""
        return self._bound_args

    def get_kwargs(self):
        """The keyword arguments bound to this node (a copy)."""
        return dict(self._bound_kwargs)

    def get_options(self):
        """The options this node's call is made with (a copy)."""
        return dict(self._bound_options)

    def execute(self, *args, **kwargs):
        """Runs the DAG ending at this node, with ``args``/``kwargs`` as its InputNode's
        value, and gives this node's result: an ObjectRef for a function or method node, an
        ActorHandle for a ClassNode, a list for a MultiOutputNode."""
        return _Execution(self, args, kwargs).run()

    def experimental_compile(self, *args, **kwargs):
        raise NotImplementedError(f"{self!r}: compiled graphs (Ray's experimental_compile) "
                                  f"are not supported; run the DAG with .execute()")

    # -- what subclasses define --------------------------------------------------------------

    def _deps(self):
        """The nodes this one needs run first besides those in its arguments."""
        return ()

    def _run(self, execution):
        """Submits this node's call (its upstream nodes have run) and gives its result."""
        raise NotImplementedError

    def _label(self):
        return type(self).__name__

    # -----------------------------------------------------------------------------------------

    def __repr__(self):
        return self._label()

    def __getattr__(self, name):
        # Only names this class lacks get here: say what to do for the two that Ray users
        # reach for by habit.
        if name == "remote":
            raise AttributeError(f".remote() cannot be used on {self!r}: it is a node of a "
                                 f"DAG; run the DAG with .execute()")
        if name == "bind":
            raise AttributeError(f".bind() cannot be used again on {self!r}: it is bound "
                                 f"already; pass it to another node's .bind(...)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __reduce__(self):
        raise TypeError(f"{self!r} is a node of a DAG, not a value, and cannot be pickled or "
                        f"sent to a task: build the whole graph with .bind() and run it with "
                        f".execute(), or pass the ObjectRef that .execute() gives")


class InputNode(DAGNode):
    """The DAG's input: the value ``execute`` is given. With one positional argument and no
    keywords it stands for that value; otherwise for all of them, as a DAGInputData.
    ``inp[0]``, ``inp["key"]`` and ``inp.key`` (InputAttributeNodes) read one part: a
    positional argument by index, a keyword argument by name, or, when execute got a single
    argument, that value's item or attribute (``execute([1, 2])``: ``inp[1]`` is 2). A DAG
    has at most one InputNode; ``with InputNode() as inp:`` is how Ray writes it."""

    def __init__(self, *args, input_type=None, **kwargs):
        if args or kwargs:
            raise ValueError("InputNode() takes no arguments: give the DAG's input to "
                             "execute(...), and read it in the DAG with the InputNode")
        super().__init__()
        self._input_type = input_type  # Ray's, for its visualisation: kept, unused
        self._attribute_nodes = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _run(self, execution):
        return execution.input_value()

    def _label(self):
        return "InputNode"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(f"InputNode has no attribute {name!r}; a keyword argument of "
                                 f"that name is read with inp[{name!r}]")
        if name in ("remote", "bind"):
            return DAGNode.__getattr__(self, name)
        return self._attribute("__getattr__", name)

    def __getitem__(self, key):
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise TypeError(f"InputNode[{key!r}]: index it with an int (a positional argument "
                            f"of execute) or a str (a keyword argument)")
        return self._attribute("__getitem__", key)

    def _attribute(self, accessor, key):
        nodes = self.__dict__.get("_attribute_nodes")
        if nodes is None:
            raise AttributeError(key)
        if (accessor, key) not in nodes:
            nodes[(accessor, key)] = InputAttributeNode(self, key, accessor)
        return nodes[(accessor, key)]


class InputAttributeNode(DAGNode):
    """One part of the DAG's input: ``inp[0]``, ``inp["key"]`` or ``inp.key`` (see
    InputNode for which part each reads)."""

    def __init__(self, dag_input_node, key, accessor_method):
        super().__init__()
        self._dag_input_node = dag_input_node
        self._key = key
        self._accessor_method = accessor_method

    def _deps(self):
        return (self._dag_input_node,)

    def _run(self, execution):
        value = execution.value_of(self._dag_input_node)
        key = self._key
        if isinstance(value, DAGInputData):
            return value._read(key, self)
        try:
            if self._accessor_method == "__getattr__":
                return getattr(value, key)
            return value[key]
        except (TypeError, KeyError, IndexError, AttributeError) as e:
            kind = next(t for t in (TypeError, KeyError, IndexError, AttributeError)
                        if isinstance(e, t))
            raise kind(f"{self!r}: execute got one argument, {value!r:.80} "
                       f"({type(value).__name__}), and {self!r} reads {self._what()} of it "
                       f"({e}); give execute several arguments or keywords, or a value that "
                       f"has it") from None

    def _what(self):
        return f"attribute {self._key!r}" if self._accessor_method == "__getattr__" else \
            f"item {self._key!r}"

    def _label(self):
        if self._accessor_method == "__getattr__":
            return f"InputAttributeNode(inp.{self._key})"
        return f"InputAttributeNode(inp[{self._key!r}])"


class DAGInputData:
    """What an InputNode stands for when ``execute`` got several arguments or keywords:
    ``data[i]`` is the i-th positional argument, ``data["key"]`` the keyword argument."""

    def __init__(self, *args, **kwargs):
        self._args = list(args)
        self._kwargs = kwargs

    def __getitem__(self, key):
        return self._read(key, None)

    def _read(self, key, node):
        where = f"{node!r}: " if node is not None else ""
        if isinstance(key, int) and not isinstance(key, bool):
            if -len(self._args) <= key < len(self._args):
                return self._args[key]
            raise IndexError(f"{where}execute got {len(self._args)} positional argument(s), "
                             f"none at index {key}; give it as execute(..., value, ...)")
        if key in self._kwargs:
            return self._kwargs[key]
        raise KeyError(f"{where}execute got no keyword argument {key!r} (it got "
                       f"{sorted(self._kwargs) or 'none'}); give it as execute({key}=...)")

    def __repr__(self):
        parts = [repr(a) for a in self._args] + [f"{k}={v!r}" for k, v in self._kwargs.items()]
        return f"DAGInputData({', '.join(parts)})"


class FunctionNode(DAGNode):
    """A task of the DAG (``f.bind(...)``): each execute runs ``f.remote(...)`` with its
    upstream nodes' results for them, and gives the task's ObjectRef."""

    def __init__(self, func_body, func_args, func_kwargs, func_options=None):
        if not callable(getattr(func_body, "remote", None)):
            raise TypeError(f"FunctionNode takes a remote function (@phalanx.remote), not "
                            f"{type(func_body).__name__}; bind it with f.bind(...)")
        super().__init__(func_args, func_kwargs, func_options)
        self._body = func_body

    def _run(self, execution):
        body = self._body.options(**self._bound_options) if self._bound_options else self._body
        return body.remote(*execution.substitute(self._bound_args),
                           **execution.substitute(self._bound_kwargs))

    def _label(self):
        return f"FunctionNode({getattr(self._body, '__name__', self._body)})"


class ClassNode(DAGNode):
    """An actor of the DAG (``Cls.bind(...)``): each execute creates it, once however many of
    its methods the DAG calls, and ``node.method.bind(...)`` (or
    ``node.method.options(...).bind(...)``) is a call of that method on it. Executing the
    ClassNode itself gives the new actor's handle."""

    def __init__(self, cls, cls_args, cls_kwargs, cls_options=None):
        if not isinstance(cls, ActorClass):
            raise TypeError(f"ClassNode takes an actor class (@phalanx.remote on a class), not "
                            f"{type(cls).__name__}; bind it with Cls.bind(...)")
        super().__init__(cls_args, cls_kwargs, cls_options)
        self._body = cls
        self._last_call = None  # its latest ClassMethodNode: the next one runs after it
        if any(isinstance(n, InputNode) for n in _nodes_in((self._bound_args,
                                                              self._bound_kwargs))):
            raise ValueError(f"{self!r}: an InputNode cannot be an argument of an actor's "
                             f"constructor (Ray's rule); pass the input to its methods: "
                             f"node.method.bind(inp)")

    def _run(self, execution):
        cls = self._body.options(**self._bound_options) if self._bound_options else self._body
        return cls.remote(*execution.substitute(self._bound_args),
                          **execution.substitute(self._bound_kwargs))

    def _ends_with_its_execute(self):
        """Whether the actor is the execute's alone: not named (get_actor reaches it, and
        get_if_exists may have found another's) and not detached."""
        options = dict(self._body._options, **self._bound_options)
        return not options.get("name") and options.get("lifetime") != "detached"

    def _class_name(self):
        cls = self._body._cls
        return cls.__name__ if cls is not None else self._body._class_name

    def _label(self):
        return f"ClassNode({self._class_name()})"

    def __getattr__(self, name):
        if name.startswith("_"):  # not a method's name: no repr here, it reads _body
            raise AttributeError(f"ClassNode has no attribute {name!r}")
        cls = self._body._cls
        has_it = cls is not None and callable(getattr(cls, name, None))
        if name in ("remote", "bind") and not has_it:
            return DAGNode.__getattr__(self, name)
        if cls is not None and not has_it:
            raise AttributeError(f"{self!r}: {self._class_name()} has no method {name!r}")
        return _UnboundClassMethod(self, name, {})


class _UnboundClassMethod:
    """``class_node.method``: ``.bind(...)`` makes the call's node, ``.options(...)`` sets
    the call's options (those of ``handle.method.options``)."""

    def __init__(self, class_node, method_name, options):
        self._class_node = class_node
        self._method_name = method_name
        self._options = options

    def options(self, **options):
        ActorMethod(None, self._method_name).options(**options)  # checks them now
        return _UnboundClassMethod(self._class_node, self._method_name,
                                   dict(self._options, **options))

    def bind(self, *args, **kwargs):
        node = ClassMethodNode(self._class_node, self._method_name, args, kwargs,
                               self._options, _prev_call=self._class_node._last_call)
        self._class_node._last_call = node
        return node

    def __getattr__(self, name):
        if name == "remote":
            raise AttributeError(f".remote() cannot be used on a method of "
                                 f"{self._class_node!r}: use .bind() for a call in the DAG")
        raise AttributeError(f"{self._class_node!r}.{self._method_name} has no attribute "
                             f"{name!r}; it has .bind() and .options()")

    def __call__(self, *args, **kwargs):
        raise TypeError(f"a method of {self._class_node!r} is called in a DAG with "
                        f".bind(...): node.{self._method_name}.bind(...)")


class ClassMethodNode(DAGNode):
    """A call of an actor's method in the DAG: ``class_node.method.bind(...)`` on the actor a
    ClassNode creates, or ``handle.method.bind(...)`` on a live actor. Each execute makes the
    call and gives its ObjectRef (a list of them for ``num_returns`` > 1; such a node also
    unpacks, ``a, b = handle.method.options(num_returns=2).bind(x)``, into one node per
    value). Calls bound on one ClassNode run in the order they were bound, each execute."""

    def __init__(self, actor, method_name, method_args, method_kwargs, method_options=None,
                 _prev_call=None):
        if not isinstance(actor, (ActorHandle, ClassNode)):
            raise TypeError(f"ClassMethodNode takes an ActorHandle or a ClassNode, not "
                            f"{type(actor).__name__}; bind it with handle.method.bind(...)")
        super().__init__(method_args, method_kwargs, method_options)
        self._parent_class_node = actor
        self._method_name = method_name
        self._prev_call = _prev_call

    def get_method_name(self):
        return self._method_name

    def _deps(self):
        if isinstance(self._parent_class_node, ActorHandle):
            return ()
        return (self._parent_class_node,) + ((self._prev_call,) if self._prev_call else ())

    def _run(self, execution):
        actor = self._parent_class_node
        handle = actor if isinstance(actor, ActorHandle) else execution.value_of(actor)
        method = getattr(handle, self._method_name)
        if self._bound_options:
            method = method.options(**self._bound_options)
        result = method.remote(*execution.substitute(self._bound_args),
                               **execution.substitute(self._bound_kwargs))
        execution.note_call(actor, result)
        return result

    def _num_returns(self):
        n = self._bound_options.get("num_returns")
        if n is not None:
            return n
        actor = self._parent_class_node
        if isinstance(actor, ActorHandle):
            return actor._method_returns.get(self._method_name, 1)
        return _method_returns(actor._body._cls).get(self._method_name, 1)

    def __iter__(self):
        n = self._num_returns()
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise TypeError(f"{self!r} gives one value (num_returns={n!r}), and does not "
                            f"unpack; bind it with .options(num_returns=k) for k values")
        return iter([self[i] for i in range(n)])

    def __getitem__(self, index):
        n = self._num_returns()
        if isinstance(n, bool) or not isinstance(n, int) or not isinstance(index, int) or \
                not -n <= index < n:
            raise IndexError(f"{self!r} gives {n!r} value(s); there is no value {index!r}")
        return _ReturnNode(self, index % n)

    def _label(self):
        actor = self._parent_class_node
        owner = actor._class_name() if isinstance(actor, ClassNode) else \
            actor._class_name.rsplit(".", 1)[-1]
        return f"ClassMethodNode({owner}.{self._method_name})"


class _ReturnNode(DAGNode):
    """The i-th value of a ClassMethodNode of several (``a, b = method.bind(...)``)."""

    def __init__(self, call, index):
        super().__init__()
        self._call = call
        self._index = index

    def _deps(self):
        return (self._call,)

    def _run(self, execution):
        return execution.value_of(self._call)[self._index]

    def _label(self):
        return f"{self._call!r}[{self._index}]"


class MultiOutputNode(DAGNode):
    """The DAG's several results: ``MultiOutputNode([a, b]).execute()`` gives the list of
    what ``a`` and ``b`` give (ObjectRefs, for function and method nodes)."""

    def __init__(self, args):
        if not isinstance(args, (list, tuple)):
            raise ValueError(f"MultiOutputNode takes a list of DAG nodes, not "
                             f"{type(args).__name__}: MultiOutputNode([a, b])")
        for i, a in enumerate(args):
            if not isinstance(a, DAGNode):
                raise ValueError(f"MultiOutputNode's output {i} is a {type(a).__name__}, not a "
                                 f"DAG node; bind it first (f.bind(...), "
                                 f"handle.method.bind(...))")
        super().__init__(args)

    def _run(self, execution):
        return list(execution.substitute(self._bound_args))

    def _label(self):
        return f"MultiOutputNode({len(self._bound_args)} outputs)"


# ---- running a DAG -------------------------------------------------------------------------

def _nodes_in(value, found=None):
    """The DAG nodes in `value`, in lists, tuples, sets and dicts (their values) at any
    depth, in order of appearance."""
    found = [] if found is None else found
    if isinstance(value, DAGNode):
        found.append(value)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            _nodes_in(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _nodes_in(v, found)
    return found


def _replace(value, results):
    """`value` with each DAG node in it replaced by its result (results: id(node) -> it);
    a container without nodes is given back as it is."""
    if isinstance(value, DAGNode):
        return results[id(value)]
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_replace(v, results) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*items)
        return type(value)(items)
    if isinstance(value, dict):
        items = {k: _replace(v, results) for k, v in value.items()}
        if all(items[k] is v for k, v in value.items()):
            return value
        try:
            return type(value)(items)
        except TypeError:  # a dict subclass built otherwise (defaultdict): a plain dict
            return items
    return value


def _upstream_first(root):
    """Every node of the DAG ending at `root`, each once, each after the nodes it needs
    (its arguments' nodes, then the others _deps names, in order)."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        needs = list(node._deps()) + _nodes_in((node._bound_args, node._bound_kwargs))
        stack.extend((n, False) for n in reversed(needs) if id(n) not in seen)
    return order


class _Execution:
    """One execute of a DAG: its nodes' results, and the actors its ClassNodes created."""

    def __init__(self, root, args, kwargs):
        self._root = root
        self._args = args
        self._kwargs = kwargs
        self._results = {}  # id(node) -> what it gave
        self._calls = {}    # id(ClassNode) -> what its method calls gave

    def run(self):
        order = _upstream_first(self._root)
        inputs = [n for n in order if isinstance(n, InputNode)]
        if len(inputs) > 1:
            raise ValueError(f"{self._root!r}: the DAG reads {len(inputs)} InputNodes; a DAG "
                             f"has one, read in parts with inp[0], inp['key'] or inp.key")
        if inputs and not (self._args or self._kwargs):
            raise TypeError(f"{self._root!r}: the DAG reads an InputNode, so execute() needs "
                            f"its input: execute(value), or several values and keywords, "
                            f"read as inp[0] and inp.key")
        if not inputs and (self._args or self._kwargs):
            raise TypeError(f"{self._root!r}: the DAG has no InputNode, so execute() takes "
                            f"no arguments; read inputs with `with InputNode() as inp:` and "
                            f"bind inp where they go")
        try:
            for node in order:
                self._results[id(node)] = node._run(self)
        finally:
            self._end_actors_when_done(order)
        return self._results[id(self._root)]

    def input_value(self):
        if len(self._args) == 1 and not self._kwargs:
            return self._args[0]
        return DAGInputData(*self._args, **self._kwargs)

    def value_of(self, node):
        return self._results[id(node)]

    def substitute(self, value):
        return _replace(value, self._results)

    def note_call(self, actor, result):
        if isinstance(actor, ClassNode):
            self._calls.setdefault(id(actor), []).append(result)

    def _end_actors_when_done(self, order):
        """Hands the actors this execute created, and kept to itself, to the reaper."""
        given_away = {id(self._root)}
        for node in order:
            given_away.update(id(n) for n in _nodes_in((node._bound_args, node._bound_kwargs)))
        for node in order:
            if not isinstance(node, ClassNode) or id(node) in given_away or \
                    id(node) not in self._results or not node._ends_with_its_execute():
                continue
            refs = []
            for result in self._calls.get(id(node), []):
                refs.extend(result if isinstance(result, list) else [result])
            # A call of no value or a generator's cannot be waited for: that actor stays.
            if all(isinstance(r, ObjectRef) for r in refs):
                _reaper.add(self._results[id(node)], refs)


class _Reaper:
    """Ends each actor a ClassNode created once the calls an execute made on it are done,
    as Ray ends an actor whose handle went out of scope: the actors of a DAG executed in a
    loop come and go instead of piling up. Its thread runs while there are actors to end."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = []   # (handle, refs of its calls)
        self._thread = None

    def add(self, handle, refs):
        with self._lock:
            self._pending.append((handle, refs))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="phalanx-dag-actors",
                                                daemon=True)
                self._thread.start()

    def _run(self):
        while True:
            with self._lock:
                if not is_initialized():
                    self._pending.clear()  # after phalanx.shutdown(): no job to end them in
                if not self._pending:
                    self._thread = None
                    return
                pending = list(self._pending)
            for item in pending:
                handle, refs = item
                try:
                    done = all(r.done() for r in refs)
                    if done:
                        kill(handle)
                except Exception:  # noqa: BLE001 - its cluster is gone: nothing to end
                    done = True
                if done:
                    with self._lock:
                        self._pending.remove(item)
            time.sleep(REAP_POLL_S)


_reaper = _Reaper()
