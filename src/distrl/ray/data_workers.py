"""Ray mode's data workers: actors that read, validate and shuffle the logged Parquet (or Minari)
dataset of offline DQN and feed a learner batches, so the learner never reads a file.

With ``data.layout=copy`` a learner's part of the dataset is split over its data workers (units
round-robin); with ``split`` each worker reads the part on its own node, which the workers of
every learner on that node divide (``data.logged.node_shares``). Each worker runs the
same ``ShuffledStream`` a rank runs over its own part (seeded ``seed + worker``, so one worker is
exactly the rank reading for itself) and sends ``DATA_CHUNK_BATCHES`` batches per call, the
next chunk requested while the learner trains on the last. A chunk is named by (epoch, first
batch): a worker that died is restarted by Ray, reopens the dataset and replays its epoch to that
batch, so the retried chunk holds the very rows the lost one held: none lost, none twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distrl.data.logged import LoggedDataset, Rows, ShuffledStream
from distrl.errors import UserError
from distrl.ope.dqn import LoggedSteps
from distrl.ray.workers import RestartableWorkers, RestartedByRay, Retries, WorkerActor

if TYPE_CHECKING:
    from distrl.algos.registry import WorkerGroup

DATA_CHUNK_BATCHES = 16
"""Batches a data worker sends per call."""


class DataWorker(WorkerActor):
    """The actor: one dataset reader and one shuffled stream of a part of it."""

    work_unit = "rows"

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        super().__init__(profile_calls, profile_path)
        self.dataset: Any = None
        self.opened: tuple[Path, str] | None = None
        """The dataset's path and ``data.on_bad_row``."""
        self.stream: ShuffledStream | None = None
        self.batches: Iterator[Rows] = iter(())
        self.position: tuple[int, int, int] | None = None
        """(batch size, epoch, next batch) of ``batches``."""

    def open(self, path: str, on_bad_row: str) -> dict[str, Any]:
        """Open the dataset; what the learner needs to know of it (``RemoteDataset``)."""
        import ray

        from distrl.data.reader import open_dataset

        self.dataset = open_dataset(Path(path), on_bad_row)
        self.opened = (Path(path), on_bad_row)
        return {key: getattr(self.dataset, key) for key in RemoteDataset.DESCRIBED} | {
            "files": self.dataset.summary(),
            "node": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),
        }

    def shard(self, rank: int, world_size: int) -> list[Any]:
        return self.dataset.shard(rank, world_size)

    def start(self, units: list[Any], buffer_rows: int, seed: int) -> int:
        """Stream ``units``; their rows per epoch."""
        self.stream = ShuffledStream(self.dataset, units, buffer_rows, seed)
        self.position = None
        return self.stream.rows_per_epoch

    def chunk(self, batch_size: int, epoch: int, first: int, count: int) -> tuple[list[Rows], int]:
        """Batches ``first`` .. ``first + count`` of ``epoch`` (fewer at its end), and the rows
        skipped as malformed so far."""
        if self.stream is None:  # Ray restarted this actor between two of the learner's calls
            raise RestartedByRay("its dataset")
        if self.position != (batch_size, epoch, first):  # a retry, a resume or a new epoch
            self.batches = self.stream.batches(batch_size, epoch)
            for _ in range(first):
                next(self.batches, None)
        chunk = [rows for _, rows in zip(range(count), self.batches, strict=False)]
        self.position = (batch_size, epoch, first + len(chunk))
        self.did(sum(len(rows) for rows in chunk))
        return chunk, self.dataset.skipped_rows

    def cpe_steps(self, max_rows: int) -> LoggedSteps:
        from distrl.ope.dqn import cpe_steps

        return cpe_steps(*self.opened, max_rows)


class RemoteDataset:
    """The dataset as a learner fed by data workers sees it: its shape, files and parts, with
    the methods ``LoggedDataset`` derives from them; nothing is read here."""

    DESCRIBED = ("obs_dim", "num_actions", "action_dim", "parametric", "continuous", "action_bounds")
    action_space = LoggedDataset.action_space
    empty_rows = LoggedDataset.empty_rows

    def __init__(self, workers: RayDataWorkers, description: dict[str, Any]) -> None:
        self.workers = workers
        self.obs_dim: int = description["obs_dim"]
        self.num_actions: int = description["num_actions"]
        self.action_dim: int | None = description["action_dim"]
        self.parametric: bool = description["parametric"]
        self.continuous: bool = description["continuous"]
        self.action_bounds: tuple[list[float], list[float]] | None = description["action_bounds"]
        self.files = [tuple(file) for file in description["files"]]

    def summary(self) -> list[tuple[str, int]]:
        return self.files

    def shard(self, rank: int, world_size: int) -> list[Any]:
        return self.workers.call(0, "shard", rank, world_size)

    @property
    def skipped_rows(self) -> int:
        return sum(self.workers.skipped_rows)


class RayDataWorkers(RestartableWorkers):
    """A learner's data workers (``runners.base.DataWorkers``)."""

    retried = "its chunk"

    def __init__(self, group: WorkerGroup, handles: list[Any], retries: Retries) -> None:
        super().__init__(group, handles, retries)
        self._open_args: tuple[str, str] = ("", "")
        self._start_args: list[tuple[Any, ...]] = []
        self.skipped_rows = [0] * len(handles)
        self.nodes: list[str] = []
        """The Ray node each worker runs on (``open``)."""
        self.node_bound = False
        """Each worker reads the part on its node (``stream_node_parts``): it must stay there."""

    def open(self, path: Path, on_bad_row: str) -> RemoteDataset:
        """The dataset as every worker opened it on its node; their rows must have one shape."""
        self._open_args = (str(path), on_bad_row)
        described = self.call_all("open", *self._open_args)

        def shape(worker: dict[str, Any]) -> dict[str, Any]:
            return {key: worker[key] for key in RemoteDataset.DESCRIBED}

        first = described[0]
        for theirs in described[1:]:
            if shape(theirs) != shape(first):
                raise UserError(
                    f"data.path: the rows on node {theirs['address']} ({path}) have {shape(theirs)}, "
                    f"those on node {first['address']} {shape(first)}",
                    code="data-nodes-rows-differ",
                )
        self.nodes = [worker["node"] for worker in described]
        return RemoteDataset(self, first)

    def stream(self, units: list[Any], buffer_rows: int, seed: int) -> RayDataStream:
        """``units`` shared out round-robin, worker w's stream seeded ``seed + w``."""
        workers = len(self.handles)
        return self._start([(units[w::workers], buffer_rows, seed + w) for w in range(workers)])

    def stream_node_parts(self, shares: list[tuple[int, int]], buffer_rows: int, seed: int) -> RayDataStream:
        """Worker w streams part ``shares[w]`` of the dataset on its own node, seeded ``seed + w``."""
        self.node_bound = True
        units = self.call_each("shard", shares)
        return self._start([(units[w], buffer_rows, seed + w) for w in range(len(self.handles))])

    def _start(self, start_args: list[tuple[Any, ...]]) -> RayDataStream:
        self._start_args = start_args
        return RayDataStream(self, self.call_each("start", start_args))

    def cpe_steps(self, max_rows: int) -> LoggedSteps:
        return self.call(0, "cpe_steps", max_rows)

    def set_up(self, index: int, rebuild: int) -> None:
        """Reopen the dataset and restart the worker's stream (the same units and seed)."""
        import ray

        handle = self.handles[index]
        opened = ray.get(handle.open.remote(*self._open_args))
        if self.node_bound and opened["node"] != self.nodes[index]:
            raise UserError(
                f"data worker {index} came back on another Ray node ({opened['address']}): under "
                "data.layout=split its part of the data is on the node it left; with the whole dataset "
                "on every node, data.layout=copy lets a worker move",
                code="ray-data-worker-moved",
            )
        if self._start_args:
            ray.get(handle.start.remote(*self._start_args[index]))


class RayDataStream:
    """A learner's shuffled batches from its data workers (``ShuffledStream``'s interface)."""

    def __init__(self, workers: RayDataWorkers, rows_per_worker: list[int]) -> None:
        self.workers = workers
        self.rows_per_worker = rows_per_worker
        self.rows_per_epoch = sum(rows_per_worker)

    def batches_per_epoch(self, batch_size: int) -> int:
        """Each worker's stream ends with its own smaller batch."""
        return sum(-(-rows // batch_size) for rows in self.rows_per_worker)

    def batches(self, batch_size: int, epoch: int) -> Iterator[Rows]:
        """Epoch ``epoch``'s batches, one from each worker in turn, each worker's next chunk on
        its way while the current one is used."""
        workers = self.workers
        streams = [_WorkerChunks(workers, w, batch_size, epoch) for w in range(len(workers.handles))]
        while streams:
            for stream in list(streams):
                rows = stream.next()
                if rows is None:
                    streams.remove(stream)
                else:
                    yield rows


class _WorkerChunks:
    """One worker's batches of an epoch, a chunk at a time, one chunk requested ahead."""

    def __init__(self, workers: RayDataWorkers, index: int, batch_size: int, epoch: int) -> None:
        self.workers, self.index, self.batch_size, self.epoch = workers, index, batch_size, epoch
        self.first = 0
        self.current: list[Rows] = []
        self.ahead = self._request(0)
        self.ended = False

    def _request(self, first: int) -> Any:
        worker = self.workers.handles[self.index]
        return worker.chunk.remote(self.batch_size, self.epoch, first, DATA_CHUNK_BATCHES)

    def next(self) -> Rows | None:
        if not self.current:
            if self.ended:
                return None
            args = (self.batch_size, self.epoch, self.first, DATA_CHUNK_BATCHES)
            self.current, skipped = self.workers.get(self.index, self.ahead, "chunk", *args)
            self.workers.skipped_rows[self.index] = skipped
            self.first += len(self.current)
            self.ended = len(self.current) < DATA_CHUNK_BATCHES
            if not self.ended:
                self.ahead = self._request(self.first)
            if not self.current:
                return None
        return self.current.pop(0)
