"""used ≤ limit for any sequence of reservations, usages and child budgets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.wire.limits import MAX_TOKEN_BUDGET, MAX_USD_BUDGET
from workflows.budget import BudgetViolation, TokenBudget

# An operation: ("call", fraction of the allowance the engine really used),
# ("spawn", requested tokens or None, fraction of its grant the child used), ("raise", tokens).
operations = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.floats(0, 1)),
        st.tuples(st.just("spawn"), st.one_of(st.none(), st.integers(1, 50_000)), st.floats(0, 1)),
        st.tuples(st.just("raise"), st.integers(1, 10_000)),
        st.tuples(
            st.just("settle_oldest"),
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 100_000), ops=operations)
def test_used_never_exceeds_limit(limit: int, ops: list[tuple]) -> None:
    budget = TokenBudget(token_limit=limit)
    children: list[tuple[int, float | None, float]] = []
    for op in ops:
        if op[0] == "call":
            budget.charge(int(budget.token_allowance * op[1]))
        elif op[0] == "spawn":
            granted, usd = budget.carve(op[1], MAX_TOKEN_BUDGET, MAX_USD_BUDGET)
            children.append((granted, usd, op[2]))
        elif op[0] == "raise":
            budget.raise_limit(op[1])
        elif children:
            granted, usd, fraction = children.pop(0)
            budget.settle_child(granted, usd, int(granted * fraction))
        assert 0 <= budget.tokens_used + budget.reserved_tokens <= budget.token_limit
    for granted, usd, fraction in children:
        budget.settle_child(granted, usd, int(granted * fraction))
    assert budget.reserved_tokens == 0
    assert 0 <= budget.tokens_used <= budget.token_limit


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 10_000), usd_limit=st.floats(0.01, 10), spends=st.lists(st.floats(0, 1), max_size=20))
def test_children_never_get_more_dollars_than_are_left(limit: int, usd_limit: float, spends: list[float]) -> None:
    budget = TokenBudget(token_limit=limit, usd_limit=usd_limit)
    for fraction in spends:
        granted, usd = budget.carve(None, MAX_TOKEN_BUDGET, MAX_USD_BUDGET)
        assert usd is not None and usd <= usd_limit
        budget.settle_child(granted, usd, int(granted * fraction), (usd or 0) * fraction)
        assert budget.usd_used <= usd_limit + 1e-9


def test_a_charge_beyond_the_allowance_is_refused() -> None:
    budget = TokenBudget(token_limit=100)
    budget.charge(60)
    with pytest.raises(BudgetViolation):
        budget.charge(41)
    assert budget.tokens_used == 60


def test_a_child_reporting_more_than_its_grant_is_refused() -> None:
    budget = TokenBudget(token_limit=100)
    granted, usd = budget.carve(40, MAX_TOKEN_BUDGET, MAX_USD_BUDGET)
    with pytest.raises(BudgetViolation):
        budget.settle_child(granted, usd, 41)


def test_a_child_carved_from_a_budget_raised_past_one_tasks_limit_gets_at_most_that_limit() -> None:
    """A parent raised past what one submit may ask for: its child is still a budget a task may have."""
    budget = TokenBudget(token_limit=3 * MAX_TOKEN_BUDGET, usd_limit=3 * MAX_USD_BUDGET)
    granted, usd = budget.carve(None, MAX_TOKEN_BUDGET, MAX_USD_BUDGET)
    assert granted == MAX_TOKEN_BUDGET and usd is not None and usd <= MAX_USD_BUDGET
    assert budget.token_allowance == 2 * MAX_TOKEN_BUDGET
