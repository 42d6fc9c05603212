"""A failed data-parallel rank stops the others at once, with its reason (the fake store and process group)."""
from __future__ import annotations

import datetime
import threading

import pytest
import torch
from fakes import A100_SXM, T4, FakeProcessGroup, FakeStore, fake_cuda

from benchlib.env import distributed
from benchlib.env.rank_watch import RECORDED_KEY, RankWatch
from benchlib.errors import ConfigError, RankFailed


class Ended(Exception):
    """What the fake ``end_process`` raises instead of ending the test's process."""


def _end(code: int) -> None:
    raise Ended(code)


def _watch(store: FakeStore, rank: int, seen: list[RankFailed], world_size: int = 2, **kwargs) -> RankWatch:
    return RankWatch(store, rank, world_size, seen.append, end_process=_end, **kwargs)


def test_nothing_posted_nothing_seen_and_a_rank_ignores_its_own_failure():
    store, seen = FakeStore(), []
    rank0, rank1 = _watch(store, 0, seen), _watch(store, 1, seen)
    assert rank0.peer_failure() is None and rank1.peer_failure() is None
    rank1.post(RuntimeError("boom\nsecond line"))
    assert rank1.peer_failure() is None, "its own failure is not another rank's"
    failure = rank0.peer_failure()
    assert isinstance(failure, RankFailed) and failure.status == "failed"
    assert str(failure).startswith("another data-parallel rank failed: rank 1 of 2 on ")
    assert str(failure).endswith(": RuntimeError: boom"), "one line"


def test_the_failed_rank_status_carries_over():
    store, seen = FakeStore(), []
    _watch(store, 3, seen, world_size=4).post(torch.OutOfMemoryError("CUDA out of memory"), "oom")
    failure = _watch(store, 0, seen, world_size=4).peer_failure()
    assert failure is not None and failure.status == "oom" and "rank 3 of 4" in str(failure)


def test_rank_zero_records_then_ends_and_tells_the_failed_rank_it_may_go():
    store, seen = FakeStore(), []
    failed = _watch(store, 1, seen)
    failed.post(ValueError("bad batch"))
    rank0 = _watch(store, 0, seen)
    with pytest.raises(Ended, match="1"):
        rank0.handle(rank0.peer_failure())
    assert len(seen) == 1 and "ValueError: bad batch" in str(seen[0])
    assert failed.wait_recorded(timeout_s=0.1), "rank 0 said the row is written"


def test_when_rank_zero_fails_the_others_end_only_once_its_row_is_written():
    """Rank 0 writes its own failure's row. A rank its watch stops must not end before that: torchrun, seeing
    it end, stops rank 0 too (in one CI run rank 0 was stopped before its row was written: no row at all)."""
    store, seen, ended = FakeStore(), [], []
    rank0 = _watch(store, 0, seen)
    rank0.post(RuntimeError("step failed"))
    rank1 = _watch(store, 1, seen)
    failure = rank1.peer_failure()
    assert failure is not None and failure.rank == 0

    def stop_rank1():
        try:
            rank1.handle(failure)
        except Ended:
            ended.append(True)

    thread = threading.Thread(target=stop_rank1)
    thread.start()
    thread.join(timeout=0.5)
    assert thread.is_alive() and not ended, "rank 1 waits while rank 0 writes the row"
    rank0.mark_recorded()
    thread.join(timeout=5)
    assert ended == [True] and len(seen) == 1


def test_a_failed_rank_waits_for_rank_zero_a_bounded_time():
    assert _watch(FakeStore(), 1, []).wait_recorded(timeout_s=0.05) is False


def test_other_ranks_end_without_writing_the_recorded_key():
    store, seen = FakeStore(), []
    _watch(store, 0, seen).post(RuntimeError("eval failed"))
    rank1 = _watch(store, 1, seen, record_wait_s=0.05)  # rank 0 never says its row is written: bounded wait
    with pytest.raises(Ended):
        rank1.handle(rank1.peer_failure())
    assert RECORDED_KEY not in store.data and len(seen) == 1


def test_the_watch_thread_acts_while_the_main_thread_is_blocked():
    """The main thread sits in a collective that never returns; the watch still stops the rank."""
    store, seen = FakeStore(), []
    ended = threading.Event()

    def end(code: int) -> None:
        ended.set()

    watch = RankWatch(store, 0, 2, seen.append, poll_s=0.01, end_process=end).start()
    try:
        assert not ended.wait(0.05), "nothing posted: the watch waits"
        _watch(store, 1, []).post(RuntimeError("step 2"))
        assert ended.wait(5), "the watch ended the rank"
        assert len(seen) == 1 and store.data[RECORDED_KEY] == b"1"
    finally:
        watch.stop()


def test_launched_connects_to_torchrun_store_only_under_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert RankWatch.launched(lambda f: None) is None
    group = FakeProcessGroup(rank=1, world_size=4).install(monkeypatch)
    watch = RankWatch.launched(lambda f: None)
    assert watch is not None and watch.store is group.store and (watch.rank, watch.world_size) == (1, 4)


def test_gpu_ranks_bind_their_own_device_and_time_out(monkeypatch):
    fake_cuda(monkeypatch, A100_SXM, A100_SXM)
    group = FakeProcessGroup(rank=1, world_size=2).install(monkeypatch)
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "42")
    info = distributed.init(torch.device("cuda"))
    assert info == distributed.DistInfo(rank=1, local_rank=1, world_size=2, backend="nccl")
    (init,) = group.called("init_process_group")
    assert init["backend"] == "nccl" and init["device_id"] == torch.device("cuda", 1)
    assert init["timeout"] == datetime.timedelta(seconds=42)
    assert group.called("cuda.set_device")[0]["args"] == (1,), "bound before the group forms"
    assert distributed.rank_device(torch.device("cuda"), info) == torch.device("cuda", 1)


def test_cpu_ranks_use_gloo_and_a_fixed_gpu_index_is_refused(monkeypatch):
    fake_cuda(monkeypatch, T4, T4)
    group = FakeProcessGroup(rank=0, world_size=2).install(monkeypatch)
    info = distributed.init(torch.device("cpu"))
    assert info is not None and info.backend == "gloo" and "device_id" not in group.called("init_process_group")[0]
    with pytest.raises(ConfigError, match="each process takes cuda:LOCAL_RANK"):
        distributed.init(torch.device("cuda", 1))


def test_weights_in_sync_and_peers_through_the_group(monkeypatch):
    group = FakeProcessGroup(rank=0, world_size=2, local_world_size=2).install(monkeypatch)
    info = distributed.DistInfo(0, 0, 2, "gloo")
    model = torch.nn.Linear(2, 2)
    assert distributed.weights_in_sync(model, info) is True
    group.peer_offset = 1e-3  # the other rank's weights sum to something else: out of sync
    assert distributed.weights_in_sync(model, info) is False
    group.peer_offset = 1e-9  # rounding between ranks' reductions is not a disagreement
    assert distributed.weights_in_sync(model, info) is True
    assert distributed.weights_in_sync(model, None) is None, "one process: nothing to compare"
    assert distributed.local_peer_pids(info) == [], "the fake's other rank is this very process"


def test_a_store_that_went_away_leaves_the_ranks_own_error_standing():
    from benchlib.run.measure import _tell_the_other_ranks

    class GoneStore(FakeStore):
        def add(self, key, amount):
            raise RuntimeError("Connection reset by peer")

    watch = RankWatch(GoneStore(), 1, 2, lambda f: None, end_process=_end)
    _tell_the_other_ranks(watch, ValueError("own error"))  # returns: the caller re-raises its own error


class _GoneStore(FakeStore):
    """The store of a rank 0 that ended: every request fails as a TCPStore client's does."""

    def add(self, key: str, amount: int) -> int:
        raise RuntimeError("Connection reset by peer")


def test_a_store_that_goes_away_mid_training_ends_the_rank_at_once(capsys):
    """Rank 0 hosts the store; when it dies without posting, the other ranks' main threads sit in a collective
    until the process group's timeout. The watch ends the rank within a poll or two, saying why."""
    ended = threading.Event()
    codes: list[int] = []

    def end(code: int) -> None:
        codes.append(code)
        ended.set()

    watch = RankWatch(_GoneStore(), 1, 2, lambda f: None, poll_s=0.01, end_process=end).start()
    try:
        assert ended.wait(5), "the rank ended instead of waiting out the timeout"
        assert codes == [1] and "the ranks' store is gone (rank 0 ended)" in capsys.readouterr().err
    finally:
        watch.stop()


def test_a_rank_whose_training_ended_lets_the_store_go_without_a_word():
    ended: list[int] = []
    watch = RankWatch(_GoneStore(), 1, 2, lambda f: None, poll_s=0.2, end_process=ended.append)
    threading.Timer(0.05, watch.stop).start()  # training ends during the grace poll
    watch._store_gone()
    assert ended == []
