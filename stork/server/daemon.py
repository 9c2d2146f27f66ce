"""The stork_server process: initialize, loop, shutdown (signal handlers only set flags).

First SIGTERM (or SIGINT): stop starting transfers, let running ones finish for up to
STORK_SHUTDOWN_GRACE seconds, then stop and requeue them. A second SIGTERM stops at once,
requeueing. SIGHUP re-reads the configuration file.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler

from stork import config
from stork.config import LiveSettings, Settings
from stork.eos.client import Estimator, RemoteEos, remote_address
from stork.eos.service import EosService
from stork.errors import ConfigError
from stork.httpd import HttpServer, read_token
from stork.job import DapType, JobSpec, JobState
from stork.server.api import api_server
from stork.server.dispatcher import Dispatcher
from stork.server.estimation import EstimationRunner
from stork.server.node import NodeKeeper
from stork.server.service import Service
from stork.store import JobStore, open_store
from stork.transfer.registry import Registry
from stork.urls import parse_hostport

log = logging.getLogger("stork.server")
_STOP_WAIT_S = 10.0


class Daemon:
    def __init__(self, settings: Settings, config_file: str | None) -> None:
        self.live = LiveSettings(settings)  # the one owner every part reads from
        self.config_file = config_file
        self._terms = 0
        self._hup = False
        self._wake = threading.Event()
        self.store: JobStore | None = None
        self.dispatcher: Dispatcher | None = None
        self.api: HttpServer | None = None
        self.scheduler: BackgroundScheduler | None = None
        self.eos: EosService | None = None
        self.estimations: EstimationRunner | None = None
        self.node: NodeKeeper | None = None

    @property
    def settings(self) -> Settings:
        return self.live.current

    # -- signals: set flags, nothing else ----------------------------------------------------

    def on_term(self, signum: int, frame: FrameType | None) -> None:
        self._terms += 1
        self._wake.set()
        if self._terms >= 2 and self.dispatcher is not None:
            self.dispatcher.stop_accepting()  # harmless flag; the loop does the rest

    def on_hup(self, signum: int, frame: FrameType | None) -> None:
        self._hup = True
        self._wake.set()

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        signal.signal(signal.SIGHUP, self.on_hup)

    # -- life cycle -------------------------------------------------------------------------

    def initialize(self) -> None:
        s = self.settings
        os.makedirs(s.state_dir, mode=0o755, exist_ok=True)
        self.store = open_store(s.database, s.node_name, s.lease_s)
        registry = Registry.default(s.module_dir, s.globus_url_copy)
        self.eos = EosService(self.live, self.store)
        self.dispatcher = Dispatcher(self.store, self.live, registry,
                                     estimator_for=self.estimator_for, eos=self.eos)
        self.estimations = EstimationRunner(self.store, self.estimator_for, s.eos_workers)
        requeued = self.dispatcher.recover()
        if requeued:
            log.warning("requeued %d job(s) left running by a previous stork_server: %s",
                        len(requeued), ", ".join(str(j.id) for j in requeued))
        if self.store.shared:  # nodes of one queue: leases, heartbeats, takeover
            self.node = NodeKeeper(self.store, self.dispatcher, s.lease_s)
            self.store.add_elsewhere_listener(self._changed_elsewhere)
            self.node.start()
        for job in self.store.list_jobs([JobState.IDLE]):
            if job.dap_type == DapType.ESTIMATION.value:
                self.estimations.start(job.id)
        self.api = api_server(Service(self.dispatcher, self.estimations, self.eos), self.live)
        self.store.add_listener(self.api.notify)  # job changes wake long polls
        self.api.start()
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                           "misfire_grace_time": None})
        self._schedule()
        self.scheduler.start()
        log.info("stork_server %d serving on %s%s (config %s)%s", os.getpid(), s.socket,
                 f" and {s.api_address}" if s.api_address else "", s.source,
                 f"; node {self.store.node} of a shared queue" if self.store.shared else "")
        self.dispatcher.start()  # ticks at once, then on wake-ups and every interval

    def _changed_elsewhere(self, job_ids: Sequence[int]) -> None:
        """Jobs another node submitted, requeued or finished: the IDLE ones may run here."""
        assert self.dispatcher is not None
        self.dispatcher.enqueue(list(job_ids))
        self.dispatcher.wake()

    def estimator_for(self, spec: JobSpec) -> Estimator:
        """The embedded EOS, or the remote eos_server the job's opt_server names."""
        assert self.eos is not None
        port = parse_hostport(self.settings.eos_api_address).port
        address = remote_address(spec.opt_server, port)
        if not address:
            return self.eos
        return RemoteEos(address, read_token(self.settings.eos_api_token_file,
                                             "EOS_API_TOKEN_FILE"))

    def _schedule(self) -> None:
        assert self.scheduler is not None and self.dispatcher is not None
        s = self.settings
        d = self.dispatcher
        self.scheduler.add_job(d.check_hung, "interval", seconds=s.hung_check_interval_s,
                               id="hung", replace_existing=True)
        self.scheduler.add_job(self._cleanup, "interval", seconds=s.cleanup_interval_s,
                               id="cleanup", replace_existing=True)
        self._schedule_asm()

    def _schedule_asm(self) -> None:
        """ASM's offline analysis on the scheduler's threads (never the dispatcher's); at once
        when there is no model yet, then every ASM_ANALYSIS_INTERVAL."""
        from stork.asm.job import ScheduledAnalysis

        assert self.scheduler is not None and self.store is not None
        job = ScheduledAnalysis(self.store, self.settings.state_dir)
        first = {"next_run_time": datetime.now(UTC)} if job.needed_now() else {}
        self.scheduler.add_job(job, "interval", seconds=self.settings.asm_analysis_interval_s,
                               id="asm", replace_existing=True, **first)

    def _cleanup(self) -> None:
        days = self.settings.job_retention_days
        if days > 0 and self.store is not None:
            removed = self.store.purge_finished(time.time() - days * 86400)
            if removed:
                log.info("cleanup: deleted %d finished job(s) older than %g days", removed, days)

    def _reload(self) -> None:
        try:
            new = config.load(self.config_file)
        except ConfigError as exc:
            log.error("SIGHUP: keeping the old configuration: %s", exc)
            return
        plan = config.reload_plan(self.settings, new)
        for name in plan.restart_changed:
            log.warning("SIGHUP: %s changed; it takes effect at the next restart", name)
        if plan.live_changed:
            log.info("SIGHUP: applying %s", ", ".join(plan.live_changed))
        new = self.live.apply(plan)  # every part reads it from its next decision on
        assert self.dispatcher is not None
        self.dispatcher.registry = Registry.default(new.module_dir, new.globus_url_copy)
        self._schedule()
        log.info("SIGHUP: configuration re-read from %s", new.source)
        self.dispatcher.wake()

    def loop(self) -> None:
        while self._terms == 0:
            self._wake.wait(1.0)
            self._wake.clear()
            if self._hup:
                self._hup = False
                self._reload()

    def shutdown(self) -> None:
        assert self.dispatcher is not None
        d = self.dispatcher
        d.stop_accepting()
        d.stop()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        grace = self.settings.shutdown_grace_s
        if d.running_count():
            log.info("shutting down: waiting up to %g s for %d running transfer(s)", grace,
                     d.running_count())
        deadline = time.monotonic() + grace
        while d.running_count() and self._terms < 2 and time.monotonic() < deadline:
            d.wait_idle(0.2)
        if d.running_count():
            log.info("shutting down: stopping %d transfer(s) and requeueing them",
                     d.running_count())
            d.kill_all()
            d.wait_idle(_STOP_WAIT_S)
        for pool in (self.estimations, self.eos):
            if pool is not None:
                pool.shutdown()
        if self.api is not None:
            self.api.stop()
        if self.node is not None:
            self.node.stop()
        if self.store is not None:
            self.store.close()
        log.info("stork_server stopped")

    def run(self) -> None:
        self.install_signals()
        self.initialize()
        try:
            self.loop()
        finally:
            self.shutdown()
