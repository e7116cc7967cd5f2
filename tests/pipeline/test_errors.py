"""Exit codes: each failure class has its own, and a fleet's never collide with a single run's."""

from __future__ import annotations

import itertools

from specdec.pipeline import errors
from specdec.pipeline.errors import FLEET_EXIT_BASE, FleetError, FleetFailure, SpecdecError


def _subclasses(cls: type[SpecdecError]) -> list[type[SpecdecError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_fleet_exit_codes_are_their_own() -> None:
    single = {cls.exit_code for cls in _subclasses(SpecdecError) if cls is not FleetError} | {1, 130}
    flags = list(FleetFailure)
    fleet = {FleetError("p", None, FleetFailure(sum(c))).exit_code
             for n in range(1, len(flags) + 1) for c in itertools.combinations(flags, n)}
    assert fleet == set(range(FLEET_EXIT_BASE + 1, FLEET_EXIT_BASE + 16)) and not fleet & single
    assert max(single - {130}) < FLEET_EXIT_BASE  # room for the single-run codes still to come
    assert FleetError("p", None, FleetFailure.lost | FleetFailure.gate).exit_code == 21
    assert errors.GateFailedError.exit_code == 10 and errors.DeviceLostError.exit_code == 9
