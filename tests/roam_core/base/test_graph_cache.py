"""PerGraphCache: per-object values, weakly held, bounded, shared with derived copies."""

from __future__ import annotations

import gc
import threading

import pytest

from roam_core.base.graph_cache import PerGraphCache


class Obj:
    def __init__(self, tag: str = "") -> None:
        self.tag = tag


def test_a_value_is_built_once_per_object_and_key() -> None:
    cache: PerGraphCache[str] = PerGraphCache()
    a, calls = Obj(), []

    def build() -> str:
        calls.append(1)
        return "v"

    assert cache.get_or_build(a, build) == "v"
    assert cache.get_or_build(a, build) == "v"
    assert cache.get_or_build(a, build, key=512) == "v"
    assert len(calls) == 2  # one per key


@pytest.mark.slow
def test_the_cache_never_keeps_an_object_alive_and_a_new_one_at_its_address_misses() -> None:
    cache: PerGraphCache[int] = PerGraphCache()
    a = Obj()
    cache.put(a, 1)
    del a
    gc.collect()
    for _ in range(100):  # new objects may reuse the dead one's id()
        assert cache.get(Obj()) is None


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: PerGraphCache[int] = PerGraphCache(max_entries=2)
    a, b, c = Obj(), Obj(), Obj()
    cache.put(a, 1)
    cache.put(b, 2)
    assert cache.get(a) == 1  # a is now the most recent
    cache.put(c, 3)
    assert (cache.get(a), cache.get(b), cache.get(c)) == (1, None, 3)
    cache.clear()
    assert len(cache) == 0


def test_a_value_is_shared_with_an_object_the_predicate_accepts() -> None:
    cache: PerGraphCache[str] = PerGraphCache(shares=lambda old, new: old.tag == new.tag)
    a, twin, other = Obj("x"), Obj("x"), Obj("y")
    cache.put(a, "arrays", key=512)
    assert cache.get(twin, key=512) == "arrays"
    assert cache.get(twin, key=256) is None  # another key is another value
    assert cache.get(other, key=512) is None


def test_threads_share_one_cache_safely() -> None:
    cache: PerGraphCache[int] = PerGraphCache(max_entries=8)
    objs = [Obj() for _ in range(32)]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i, o in enumerate(objs):
                assert cache.get_or_build(o, lambda i=i: i) == i
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) <= 8
