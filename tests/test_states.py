"""The local-state machine and the grid-state precedence table, over every combination."""

from __future__ import annotations

import itertools

import pytest

from jim.states import GramState, LocalState, aggregate, grid_exit_code, may_transition, parse_gram_state

L = LocalState
G = GramState
ALL = list(LocalState)
TERMINAL = {L.DONE, L.FAILED, L.CANCELLED, L.LOST}
PREVIOUS = [None, G.PENDING, G.ACTIVE, G.SUSPENDED, G.DONE, G.FAILED]


def test_terminal_flags():
    assert {s for s in ALL if s.terminal} == TERMINAL


@pytest.mark.parametrize("old,new", list(itertools.product(ALL, ALL)))
def test_terminal_states_never_go_back(old, new):
    allowed = may_transition(old, new)
    if old.terminal or old is new:
        assert not allowed
    elif new.terminal:
        assert allowed


@pytest.mark.parametrize(
    "old,new,ok",
    [
        (L.PLANNED, L.SUBMITTING, True),
        (L.SUBMITTING, L.QUEUED, True),
        (L.QUEUED, L.RUNNING, True),
        (L.RUNNING, L.QUEUED, True),  # requeued by the batch system
        (L.HELD, L.QUEUED, True),
        (L.SUSPENDED, L.RUNNING, True),
        (L.QUEUED, L.SUBMITTING, False),
        (L.RUNNING, L.PLANNED, False),
        (L.QUEUED, L.PLANNED, False),
    ],
)
def test_non_terminal_transitions(old, new, ok):
    assert may_transition(old, new) is ok


def combos():
    """Every non-empty set of local states present (2^10 - 1 of them)."""
    for r in range(1, len(ALL) + 1):
        yield from itertools.combinations(ALL, r)


@pytest.mark.parametrize("previous", PREVIOUS, ids=lambda p: p.name if p else "none")
@pytest.mark.parametrize("gathered", [False, True])
@pytest.mark.parametrize("cancelled", [False, True])
def test_precedence_table_over_every_combination(previous, gathered, cancelled):
    for states in combos():
        present = set(states)
        g = aggregate(states, previous=previous, outputs_gathered=gathered, cancelled=cancelled)
        all_terminal = present <= TERMINAL
        failures = present & {L.FAILED, L.CANCELLED, L.LOST}
        ctx = (states, previous, gathered, cancelled, g)
        if previous in (G.DONE, G.FAILED):
            assert g is previous, ctx
            continue
        # DONE only when every local job ended, outputs are gathered, nobody failed or cancelled
        assert (g is G.DONE) == (all_terminal and gathered and not failures and not cancelled), ctx
        if all_terminal and gathered and (failures or cancelled):
            assert g is G.FAILED, ctx
        if not (all_terminal and gathered):
            assert not g.terminal, ctx
        if L.RUNNING in present:
            assert g is G.ACTIVE, ctx
        # SUSPENDED exactly when nothing runs and every waiting job is held or suspended
        waiting = present - TERMINAL
        if waiting and waiting <= {L.HELD, L.SUSPENDED}:
            assert g is G.SUSPENDED, ctx
        if g is G.SUSPENDED:
            assert waiting and waiting <= {L.HELD, L.SUSPENDED}, ctx
        # PENDING only while nothing has run or ended, and never after ACTIVE or SUSPENDED
        if g is G.PENDING:
            assert not (present & TERMINAL) and L.RUNNING not in present, ctx
            assert present <= {L.PLANNED, L.SUBMITTING, L.QUEUED, L.HELD}, ctx
            assert previous not in (G.ACTIVE, G.SUSPENDED), ctx
        assert g is not G.UNSUBMITTED, ctx


@pytest.mark.parametrize(
    "states,previous,gathered,expected",
    [
        ([L.PLANNED] * 3, None, False, G.PENDING),
        ([L.QUEUED, L.SUBMITTING], None, False, G.PENDING),
        ([L.QUEUED, L.RUNNING], G.PENDING, False, G.ACTIVE),
        ([L.QUEUED, L.QUEUED], G.ACTIVE, False, G.ACTIVE),  # requeued: ACTIVE never goes back to PENDING
        ([L.DONE, L.QUEUED], G.PENDING, False, G.ACTIVE),  # work has been done
        ([L.HELD, L.HELD], G.PENDING, False, G.SUSPENDED),
        ([L.HELD, L.QUEUED], G.PENDING, False, G.PENDING),
        ([L.HELD, L.QUEUED], G.SUSPENDED, False, G.ACTIVE),  # SUSPENDED -> PENDING is dropped by GRAM
        ([L.DONE, L.DONE], G.ACTIVE, False, G.ACTIVE),  # outputs not gathered yet
        ([L.DONE, L.DONE], G.ACTIVE, True, G.DONE),
        ([L.DONE, L.FAILED], G.ACTIVE, True, G.FAILED),
        ([L.DONE, L.LOST], G.ACTIVE, True, G.FAILED),
        ([L.RUNNING, L.FAILED], G.ACTIVE, False, G.ACTIVE),  # a failure waits for the others
        ([L.DONE], G.FAILED, True, G.FAILED),  # terminal is final
    ],
)
def test_table_rows(states, previous, gathered, expected):
    assert aggregate(states, previous=previous, outputs_gathered=gathered) is expected


def test_failure_policy_fraction():
    states = [L.DONE] * 9 + [L.FAILED]
    assert aggregate(states, outputs_gathered=True, max_failed_fraction=0.0) is G.FAILED
    assert aggregate(states, outputs_gathered=True, max_failed_fraction=0.1) is G.DONE
    assert aggregate(states + [L.LOST], outputs_gathered=True, max_failed_fraction=0.1) is G.FAILED


def test_cancelled_grid_job_is_failed_even_if_all_done():
    assert aggregate([L.DONE, L.DONE], outputs_gathered=True, cancelled=True) is G.FAILED


def test_grid_exit_code():
    assert grid_exit_code([(L.DONE, 0), (L.FAILED, 3), (L.FAILED, 5)], G.FAILED) == 3
    assert grid_exit_code([(L.DONE, 0), (L.LOST, None)], G.FAILED) == 1
    assert grid_exit_code([(L.DONE, 0)], G.DONE) == 0
    assert grid_exit_code([(L.RUNNING, None)], G.ACTIVE) is None


def test_gram_numbers_and_names():
    assert [int(s) for s in G] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert parse_gram_state("active") is G.ACTIVE and parse_gram_state("8") is G.DONE
