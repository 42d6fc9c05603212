"""A watchdog over the data-parallel ranks: one that fails stops the others at once, and says why.

A rank that fails inside training cannot tell the others through a collective: they are waiting in
DDP's gradient all-reduce, which no other collective matches, so they would wait out the process
group's timeout (gloo) or be aborted without a word by NCCL's watchdog. Instead a failing rank posts its
error to the key-value store torchrun already serves every rank (``MASTER_ADDR:MASTER_PORT``), and a
thread in every rank reads that store once a second. On seeing another rank's failure, rank 0 records
it (the failure row names the rank and its error) and every rank ends, whatever its main thread is
blocked in. The cost while nothing fails: one small store read per second per rank.
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Protocol

from ..errors import RankFailed, one_line
from . import harness

COUNT_KEY = "benchlib/failures"
MESSAGE_KEY = "benchlib/failed/{rank}"
RECORDED_KEY = "benchlib/recorded"
POLL_S = 1.0
RECORD_WAIT_S = 30.0  # how long a failed rank waits for rank 0 to write the row before it ends
EXIT_PEER_FAILED = 1
STORE_TIMEOUT_S = 30.0

OnPeerFailure = Callable[[RankFailed], None]


class Store(Protocol):
    """What the watch asks of ``torch.distributed.Store`` (a TCPStore client here, a dict in tests)."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...

    def wait(self, keys: list[str], timeout: datetime.timedelta) -> None: ...


def _end_process(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class RankWatch:
    """Posts this rank's failure and watches for the others'; see the module docstring."""

    def __init__(self, store: Store, rank: int, world_size: int, on_peer_failure: OnPeerFailure, *,
                 poll_s: float = POLL_S, end_process: Callable[[int], None] = _end_process,
                 record_wait_s: float = RECORD_WAIT_S) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self._record_wait_s = record_wait_s
        self._on_peer_failure, self._poll_s, self._end_process = on_peer_failure, poll_s, end_process
        self._posted = 0
        self._handled = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def launched(cls, on_peer_failure: OnPeerFailure) -> RankWatch | None:
        """The watch of this torchrun rank, connected to torchrun's store (None without torchrun)."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size <= 1 or "MASTER_ADDR" not in os.environ:
            return None
        import torch.distributed as dist

        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S))
        return cls(store, int(os.environ.get("RANK", "0")), world_size, on_peer_failure)

    def start(self) -> RankWatch:
        self._thread = threading.Thread(target=self._loop, name="benchlib-rank-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self._poll_s)

    def post(self, exc: BaseException, status: str = "failed") -> None:
        """This rank failed (its row would say ``status``): tell the others, the message before the count."""
        message = f"rank {self.rank} of {self.world_size} on {socket.gethostname()}: {one_line(exc)}"
        self.store.set(MESSAGE_KEY.format(rank=self.rank), f"{status}\n{message}")
        self.store.add(COUNT_KEY, 1)
        self._posted = 1

    def peer_failure(self) -> RankFailed | None:
        """The failure another rank posted, if any (the lowest rank's when several did)."""
        if self.store.add(COUNT_KEY, 0) <= self._posted:
            return None
        for rank in range(self.world_size):
            key = MESSAGE_KEY.format(rank=rank)
            if rank != self.rank and self.store.check([key]):
                status, _, message = self.store.get(key).decode().partition("\n")
                return RankFailed(f"another data-parallel rank failed: {message}", status, rank)
        return None

    def handle(self, failure: RankFailed) -> None:
        """Stop this rank for ``failure`` (rank 0 records it first); only the first caller acts, for good."""
        self._handled.acquire()  # a second caller (the other thread) waits here until the process ends
        try:
            self._on_peer_failure(failure)
            if self.rank == 0:
                self.store.set(RECORDED_KEY, "1")
            elif failure.rank == 0:  # rank 0 writes its own failure's row: ending now, this rank would have
                self.wait_recorded(self._record_wait_s)  # torchrun stop rank 0 before the row is written
        finally:
            self._end_process(EXIT_PEER_FAILED)

    def mark_recorded(self) -> None:
        """Rank 0 wrote the row of a failure (its own): the ranks waiting for it may end."""
        self.store.set(RECORDED_KEY, "1")

    def wait_recorded(self, timeout_s: float = RECORD_WAIT_S) -> bool:
        """A failed rank other than 0: give rank 0 the time to write the row before this process ends."""
        try:
            self.store.wait([RECORDED_KEY], datetime.timedelta(seconds=timeout_s))
        except RuntimeError:  # DistStoreError on a timeout, or the store gone
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                with harness.charged("rank-watch"):
                    failure = self.peer_failure()
            except RuntimeError:  # the store went away with the process that served it (rank 0's agent)
                self._store_gone()
                return
            if failure is not None:
                self.handle(failure)
                return

    def _store_gone(self) -> None:
        """The store is gone while this rank still trains: whoever served it ended, most often rank 0 failing
        before it could post. The collectives this rank waits in would sit out the process group's timeout
        (minutes); end now, saying why. A rank whose training ended calls ``stop`` first: one more poll's
        grace lets a rank 0 that ended normally go without a word."""
        if self._stop.wait(self._poll_s):
            return
        print(f"benchlib: rank {self.rank} of {self.world_size}: the ranks' store is gone (rank 0 ended): this "
              "rank ends too instead of waiting out the collective's timeout", file=sys.stderr)
        self._end_process(EXIT_PEER_FAILED)
