"""What a PS shard counts per key, and its frequency file (`--freq`, contract/freqfile.py):
`cold` = entries received in PUSH packets, `collected` = iterations whose switch sum was
collected. With a `.live` path the counters are the file itself (memory-mapped, always
current); otherwise the file is written at exit and, with `--freq-every N`, rewritten every
N iterations for the controller's online loop (controller/online/)."""

from __future__ import annotations

import threading

import numpy as np

from contract.freqfile import LiveFrequency, is_live, write_frequency
from hosts.agent import AgentError
from hosts.ps_config import PSConfig


class FrequencyCounts:
    """A shard's per-key `cold` and `collected` counters, indexed by key, and their file."""

    def __init__(self, config: PSConfig) -> None:
        self.path = config.freq_path
        # the file's fields that do not change while the PS runs
        self.meta: dict[str, int | str] = {
            "job": config.job_id,
            "shard": f"{config.shard}/{config.n_shards}",
            "workers": config.n_workers,
        }
        n = config.key_space
        self._live: LiveFrequency | None = None
        if self.path and is_live(self.path):  # the counters are the file
            try:
                self._live = LiveFrequency(self.path, n, self.meta)
            except (OSError, ValueError) as e:
                raise AgentError(f"--freq {self.path}: {e}") from None
            self.cold, self.collected = self._live.cold, self._live.collected
        else:
            self.cold = np.zeros(n, dtype=np.int64)
            self.collected = np.zeros(n, dtype=np.int64)
        self._writer: threading.Thread | None = None  # a --freq-every rewrite in flight
        self._error: BaseException | None = None

    def add(self, iteration: int, cold_keys: np.ndarray, collected_keys: np.ndarray) -> None:
        """Count iteration `iteration`'s cold entries and collected sums (one per key listed;
        a key listed twice counts twice). A .live file's readers wait while they are added."""
        if self._live is not None:
            self._live.begin(iteration)
        for keys, counts in ((cold_keys, self.cold), (collected_keys, self.collected)):
            if len(keys):
                np.add.at(counts, keys, 1)
        if self._live is not None:
            self._live.done(iteration)

    def write(self, iterations: int, background: bool = False) -> None:
        """The frequency file of the first `iterations` iterations (read while running by the
        controller's online loop: hence written whole, then renamed).

        With `background` (the --freq-every rewrites) the counters are copied and the file
        is written by a thread, so the next iteration's pulls do not wait for it (tens of
        milliseconds with tens of thousands of keys); a rewrite still in flight is waited
        for first, so files are renamed into place in iteration order, the last one too."""
        if self._live is not None or not self.path:
            return  # a .live file is current since the last iteration's counts were added
        path = self.path
        meta = {**self.meta, "iterations": iterations}
        if self._writer is not None:
            self._writer.join()
            self._writer = None
            if self._error is not None:  # the last rewrite failed: fail as it would have
                error, self._error = self._error, None
                raise error
        if not background:
            write_frequency(path, self.cold, self.collected, meta)
            return
        cold, collected = self.cold.copy(), self.collected.copy()

        def write() -> None:
            try:
                write_frequency(path, cold, collected, meta)
            except BaseException as e:  # raised in the PS's thread at the next write
                self._error = e

        self._writer = threading.Thread(target=write, name="freq-writer", daemon=True)
        self._writer.start()
