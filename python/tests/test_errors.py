"""Errors reach Python as their phalanx classes, picked by the C++ error's kind (then the
call's domain, then the status code), never by the text of the message."""

import pytest

from phalanx import _native
import phalanx
from phalanx import collective, exceptions

# absl::StatusCode numbers.
CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 1, 2, 3, 4, 5
FAILED_PRECONDITION, ABORTED, UNAVAILABLE = 9, 10, 14


@pytest.mark.parametrize("code, kind, domain, cls", [
    (ABORTED, "ActorDied", "", phalanx.ActorDiedError),
    (ABORTED, "CreationFailed", "", phalanx.ActorDiedError),
    (ABORTED, "WorkerCrashed", "", exceptions.WorkerCrashedError),
    (ABORTED, "OutOfMemory", "", exceptions.OutOfMemoryError),
    (CANCELLED, "ActorUnavailable", "", phalanx.ActorUnavailableError),
    (UNKNOWN, "TaskError", "", phalanx.TaskError),
    (INVALID_ARGUMENT, "InvalidCall", "", phalanx.InvalidCallError),
    (DEADLINE_EXCEEDED, "GetTimeout", "", phalanx.GetTimeoutError),
    # The kind wins over the domain: a placement group's timeout is a GetTimeoutError.
    (DEADLINE_EXCEEDED, "GetTimeout", "placement_group", phalanx.GetTimeoutError),
    (FAILED_PRECONDITION, "", "placement_group", phalanx.PlacementGroupError),
    (INVALID_ARGUMENT, "", "placement_group", phalanx.PlacementGroupError),
    (DEADLINE_EXCEEDED, "", "collective", phalanx.CollectiveError),
    (NOT_FOUND, "", "", phalanx.NotFoundError),
    (INVALID_ARGUMENT, "", "", phalanx.InvalidArgumentError),
    (UNAVAILABLE, "", "", phalanx.PhalanxError),
    (FAILED_PRECONDITION, "", "", phalanx.PhalanxError),
])
def test_each_error_kind_and_code_maps_to_its_class(code, kind, domain, cls):
    with pytest.raises(cls) as e:
        _native._raise_status(code, kind, "what went wrong", domain)
    assert type(e.value) is cls
    assert str(e.value) == "what went wrong"
    assert isinstance(e.value, phalanx.PhalanxError)


def test_a_cancelled_call_is_a_task_cancelled_error_and_a_task_error():
    # Ray's documentation catches a cancelled call as either (RayTaskError whose cause is
    # TaskCancelledError).
    with pytest.raises(phalanx.TaskCancelledError) as e:
        _native._raise_status(CANCELLED, "TaskCancelled", "the call was cancelled", "")
    assert isinstance(e.value, exceptions.RayTaskError)
    assert str(e.value) == "the call was cancelled"
    import pickle
    again = pickle.loads(pickle.dumps(e.value))
    assert isinstance(again, phalanx.TaskCancelledError) and isinstance(again, phalanx.TaskError)


def test_a_task_error_carries_its_remote_class_beside_the_message():
    with pytest.raises(phalanx.TaskError) as e:
        _native._raise_status(UNKNOWN, "TaskError", "KeyError: 'x'\n\nTraceback ...",
                               detail="KeyError")
    assert e.value.cause_type == "KeyError"
    assert e.value.remote_traceback.startswith("KeyError")


def test_error_classes_are_phalanx_errors_and_keep_their_python_bases():
    assert issubclass(phalanx.CollectiveError, phalanx.PhalanxError)
    assert issubclass(phalanx.CollectiveError, RuntimeError)
    assert issubclass(phalanx.GetTimeoutError, TimeoutError)
    assert issubclass(phalanx.InvalidArgumentError, ValueError)
    assert issubclass(phalanx.NotFoundError, LookupError)
    assert exceptions.CollectiveError is collective.CollectiveError


def test_a_bad_job_spec_is_refused_by_the_cpp_parser_naming_the_field():
    with pytest.raises(phalanx.InvalidArgumentError, match="replicas"):
        _native.parse_job_spec("name: j\ntrainer: T\nlanguage: python\nreplicas: 0\n")
    spec = _native.parse_job_spec(
        "name: j\ntrainer: T\nlanguage: python\nreplicas: 2\nmaxReplicas: 3\n"
        "resources: {CPU: 1, memory: 1Gi}\n"
        "faultTolerantPolicy: [{event: oom, action: respawnLarger}]\n")
    assert (spec.replicas, spec.min_replicas, spec.max_replicas) == (2, 2, 3)
    assert spec.resources["memory"] == float(1 << 30)
    assert [(p.event, p.action) for p in spec.policies] == [("oom", "respawnLarger")]
    again = _native.parse_job_spec(spec.to_yaml())
    assert again.to_yaml() == spec.to_yaml()


def test_a_timed_out_placement_group_ready_raises_get_timeout(cluster):
    everything = phalanx.placement_group([{"CPU": 4}])  # the whole (4-CPU) cluster
    assert phalanx.get(everything.ready(), timeout=30) is everything
    pg = phalanx.placement_group([{"CPU": 1}])  # cannot be placed while `everything` holds
    try:
        with pytest.raises(phalanx.GetTimeoutError):
            phalanx.get(pg.ready(), timeout=0.5)
        assert pg.wait(0.2) is False
    finally:
        phalanx.remove_placement_group(pg)
        phalanx.remove_placement_group(everything)


def test_lookups_of_what_the_cluster_does_not_know(cluster):
    with pytest.raises(ValueError, match="no live actor named"):
        phalanx.get_actor("no-such-actor")
    # A group no node can hold waits, as Ray's does (a node that has it may join), warning
    # why; its ready() times out.
    with pytest.warns(UserWarning, match="INFEASIBLE: bundle 0 {CPU: 1000} is bigger"):
        pg = phalanx.placement_group([{"CPU": 1000}], strategy="STRICT_PACK")
    try:
        with pytest.raises(phalanx.GetTimeoutError, match="INFEASIBLE"):
            phalanx.get(pg.ready(), timeout=1)
        [info] = [g for g in _native.list_placement_groups()
                  if g["placement_group_id"] == pg.id]
        assert info["state"] == "PENDING", info
    finally:
        phalanx.remove_placement_group(pg)
    # A bundle that could never be valid is still refused at once.
    with pytest.raises(phalanx.PlacementGroupError):
        phalanx.placement_group([{"CPU": -1}])
