"""The Ray executor: the same workers as Ray actors, one per device, for engines that span
machines (`--distributed-executor-backend ray`; `pip install 'pagoda[ray]'`).

It joins the Ray cluster at RAY_ADDRESS, or starts one on this host, reserves a placement
group of one bundle per device (the platform's Ray resource, packed on as few nodes as
can hold them), and starts an actor in each. The actors join torch.distributed at the
first one's address, exactly as the multiprocess executor's workers do, and run the same
`Worker`. Every wait on them takes each result as it comes, so a failed or dead actor
ends the wait at once; a monitor thread also notices an actor's death while the engine
is idle and wakes the engine core (`health_handles`).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import threading
from typing import Any

from pagoda.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput
from pagoda.executor.base import Executor, Worker, WorkerDiedError
from pagoda.executor.ray_worker import RayWorker
from pagoda.executor.worker_process import answering_rank
from pagoda.platforms import resolve_platform

PLACEMENT_TIMEOUT_S = 120
ACTOR_THREADS = 16
"""Threads of each actor: one holds `wait_until_stopped`, the others take calls as Ray
delivers them, each waiting for its turn; more than the calls ever in flight at once."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'pagoda[ray]'") from None
    return ray


def _bundle_options(resource: str) -> dict[str, Any]:
    """The actor's claim on its bundle: Ray's own CPU and GPU keywords, else a custom
    resource (and no CPU of its own, which the bundle does not hold)."""
    if resource == "CPU":
        return {"num_cpus": 1}
    if resource == "GPU":
        return {"num_gpus": 1, "num_cpus": 0}
    return {"resources": {resource: 1}, "num_cpus": 0}


class _StepReply:
    """A launched step: every actor's part, read as each finishes."""

    def __init__(self, executor: RayExecutor, refs: list[Any]):
        self._executor, self._refs = executor, refs
        self._output: ModelRunnerOutput | None = None

    def result(self) -> ModelRunnerOutput:
        if self._output is None:
            self._output = self._executor._gather(self._refs)[self._executor.answering_rank]
        return self._output


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, config: Any, worker_cls: str | type[Worker], *, first_device: int = 0,
                 **worker_kwargs: Any):
        """`first_device` is not used: Ray hands each actor its device."""
        super().__init__(config)
        ray = self._ray = _ray()
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._remove_placement_group = remove_placement_group
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                     log_to_driver=False)
        resource = resolve_platform(config.device).ray_resource
        if resource is None:
            raise ValueError(f"platform {config.device!r} does not run on Ray")
        world_size = config.parallel.world_size
        self.answering_rank = answering_rank(config)
        self._group = placement_group([{resource: 1}] * world_size, strategy="PACK")
        self.actors: list[Any] = []
        self._closing = False
        self._awaiting: _StepReply | None = None
        """The launched step that awaits its token bitmask."""
        self._death: str | None = None
        self._wake_reader, self._wake_writer = multiprocessing.Pipe(duplex=False)
        self._tickets = itertools.count()
        """Turns of the calls made to every actor (see `pagoda.executor.ray_worker`)."""
        try:
            ready, _ = ray.wait([self._group.ready()], timeout=PLACEMENT_TIMEOUT_S)
            if not ready:
                raise RuntimeError(
                    f"the Ray cluster did not provide {world_size} x {{'{resource}': 1}} in "
                    f"{PLACEMENT_TIMEOUT_S} s (its resources: {ray.cluster_resources()})")
            actor = ray.remote(RayWorker)
            level = logging.getLogger().getEffectiveLevel()
            self.actors = [
                actor.options(max_concurrency=ACTOR_THREADS, **_bundle_options(resource),
                              scheduling_strategy=PlacementGroupSchedulingStrategy(
                                  self._group, placement_group_bundle_index=rank))
                .remote(worker_cls, config, rank, rank == self.answering_rank,
                        worker_kwargs, level)
                for rank in range(world_size)]
            ip, port, _ = ray.get(self.actors[0].address.remote())
            self.pids = [pid for _, _, pid in self._gather(
                [a.address.remote() for a in self.actors])]
            self._watch([a.wait_until_stopped.remote() for a in self.actors])
            ticket = next(self._tickets)
            self._gather([a.start.remote(ticket, f"tcp://{ip}:{port}") for a in self.actors])
            self.collective_rpc("init_device")
            self.collective_rpc("load_model")
        except BaseException:
            self.shutdown()
            raise

    def collective_rpc(
        self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        ticket = next(self._tickets)
        return self._gather([a.call.remote(ticket, method, args, kwargs or {})
                             for a in self.actors])

    def execute_model(self, scheduler_output: SchedulerOutput) -> _StepReply:
        ticket = next(self._tickets)
        reply = _StepReply(self, [a.execute_model.remote(ticket, scheduler_output)
                                  for a in self.actors])
        if scheduler_output.grammar_bitmask_later:
            self._awaiting = reply
        return reply

    def provide_token_bitmask(self, bitmask: Any) -> None:
        reply, self._awaiting = self._awaiting, None
        assert reply is not None, "no launched step awaits a token bitmask"
        ticket = next(self._tickets)
        reply._refs = [a.provide_token_bitmask.remote(ticket, bitmask) for a in self.actors]

    def health_handles(self) -> list[Any]:
        return [self._wake_reader]

    def check_health(self) -> None:
        if self._death is not None:
            raise WorkerDiedError(self._death)

    def shutdown(self) -> None:
        if self._closing:
            return
        self._closing = True
        ray = self._ray
        if self.actors:
            ray.wait([a.stop.remote() for a in self.actors], num_returns=len(self.actors),
                     timeout=10)
            for actor in self.actors:
                ray.kill(actor)
        self._remove_placement_group(self._group)
        if self._started_ray:
            ray.shutdown()

    # ---- internals --------------------------------------------------------------------

    def _gather(self, refs: list[Any]) -> list[Any]:
        """The results of one call per actor, in rank order; WorkerDiedError as soon as
        any fails or its actor dies."""
        ray = self._ray
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            rank = rank_of[ready[0]]
            try:
                results[rank] = ray.get(ready[0])
            except ray.exceptions.RayActorError as exc:
                raise WorkerDiedError(f"worker rank {rank} (Ray actor) died: {exc}") from None
            except ray.exceptions.RayTaskError as exc:
                raise WorkerDiedError(f"worker rank {rank} failed: {exc}") from None
        return results

    def _watch(self, refs: list[Any]) -> None:
        """A thread that records the first actor to die and wakes the engine core."""

        def watch() -> None:
            ready, _ = self._ray.wait(refs, num_returns=1)
            if self._closing:
                return
            rank = refs.index(ready[0])
            self._death = f"worker rank {rank} (Ray actor, pid {self.pids[rank]}) died"
            self._wake_writer.send(self._death)

        threading.Thread(target=watch, name="pagoda-ray-monitor", daemon=True).start()
