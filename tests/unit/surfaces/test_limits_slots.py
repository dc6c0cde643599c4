"""The in-flight cap's wait for a slot (``limits.Slots``): arrival order, timeouts, a full
queue, and a slot handed over just as its waiter gives up is neither lost nor doubled."""

from __future__ import annotations

import asyncio
import time

import pytest

from sits_observe.surfaces.service.http.limits import Slots


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_free_slots_are_taken_at_once_and_the_next_caller_waits_for_a_release() -> None:
    async def scenario() -> list[str]:
        slots = Slots(2, 8)
        order: list[str] = []
        assert await slots.acquire(0) and await slots.acquire(0)
        assert not await slots.acquire(0)  # 0: refused at once when none is free

        async def waiter(name: str) -> None:
            assert await slots.acquire(5)
            order.append(name)

        tasks = [asyncio.create_task(waiter(n)) for n in ("first", "second", "third")]
        await asyncio.sleep(0.01)
        assert slots.waiting == 3 and order == []
        slots.release()
        await asyncio.sleep(0.01)
        assert order == ["first"]
        slots.release()
        slots.release()
        await asyncio.gather(*tasks)
        return order

    assert run(scenario()) == ["first", "second", "third"]


def test_a_release_is_handed_to_a_waiter_before_a_newcomer() -> None:
    async def scenario() -> tuple[bool, bool]:
        slots = Slots(1, 8)
        assert await slots.acquire(0)
        queued = asyncio.create_task(slots.acquire(5))
        await asyncio.sleep(0.01)
        slots.release()  # handed to the queued caller, not left free
        newcomer = await slots.acquire(0)
        return await queued, newcomer

    assert run(scenario()) == (True, False)


def test_a_waiter_times_out_and_a_full_queue_refuses_at_once() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        slots = Slots(1, 1)
        assert await slots.acquire(0)
        waiting = asyncio.create_task(slots.acquire(0.05))
        await asyncio.sleep(0.01)
        full = await slots.acquire(5)  # one already waits: refused without waiting
        timed_out = await waiting
        slots.release()  # the timed-out waiter is skipped: the slot is free again
        return full, timed_out, int(await slots.acquire(0))

    assert run(scenario()) == (False, False, 1)


def test_a_slot_handed_over_as_the_timeout_fires_stays_with_the_waiter() -> None:
    async def scenario() -> tuple[bool, bool]:
        slots = Slots(1, 8)
        assert await slots.acquire(0)
        waiting = asyncio.create_task(slots.acquire(0.05))
        await asyncio.sleep(0.01)
        time.sleep(0.1)  # the loop is blocked past the waiter's deadline ...
        slots.release()  # ... so the hand-over and the timeout are due in one iteration
        got = await waiting
        if got:
            slots.release()
        # Whatever the race gave, exactly one slot exists afterwards.
        first = await slots.acquire(0)
        second = await slots.acquire(0)
        return first, second

    assert run(scenario()) == (True, False)


def test_a_cancelled_waiter_gives_back_a_slot_it_was_handed() -> None:
    async def scenario() -> bool:
        slots = Slots(1, 8)
        assert await slots.acquire(0)
        waiting = asyncio.create_task(slots.acquire(5))
        await asyncio.sleep(0.01)
        slots.release()  # handed over, but the waiter is cancelled before it runs
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return bool(await slots.acquire(0))

    assert run(scenario()) is True
