"""`make reliability-failover`: a Redis failover under load on a local replicated cluster
(issues 22 and 32), with a ledger of every acknowledged job and result.

The stack: a local Redis Cluster of 3 primaries with one replica each, or two (`--replicas 2`,
the production shape) (payloadstore_devstack.services.LocalRedisCluster), the S3 emulator, one
gateway in cluster mode with REDIS_MIN_REPLICA_ACKS (1 by default; `--acks 0` for the
counterfactual), daemons that a supervisor restarts. Load: JOBS jobs (1 KiB inline, 300 KiB and
2 MiB through S3) from 4 client threads. The fault, while the load runs: a replica of the shard
that holds the namespace's queues is stalled (SIGSTOP) for STALL_S, its primary is SIGKILLed
during the stall, the replica resumes and a replica is promoted; then, by scenario:

- `returns`: the old primary is started again and rejoins as a replica;
- `never-returns`: the old primary stays dead. With one replica per primary the promoted one
  has no replica of its own, and the shard goes on with writes acknowledged by the replicas it
  has (REDIS_REPLICA_ACK_POLICY=connected; before it, every write answered 503 from then on);
  with two, the other replica follows the promoted one and acknowledges as before. Every
  acknowledged job must end within NEVER_RETURNS_DEADLINE_S of the kill.

By default three runs: `returns` on one replica per primary, `never-returns` on one and on two
(`--scenario`, `--replicas` pick one).

Ledger, per job: `lost` = an acknowledged job (the client holds its id) that never ends (within
the deadline), or 404; `wrong` = a wrong result or any other end; `twice` = a job whose function
ran again after its result post was acknowledged (204): an acknowledged result lost with its
primary would run the job again after the visibility timeout. A job that runs again because its
result was never acknowledged (its post answered 503 until its daemon gave up, or its lease
lapsed while heartbeats answered 503) is at-least-once delivery doing its work: counted as
`rerun`, reported, not a failure.
Each run ends with `failover: N jobs, N ok, 0 lost, 0 wrong, 0 twice, ... (acks=K, replicas=R,
<scenario>), S s` and, when the old primary never returns, the time from the kill to the
promotion and to the last result read, and how often the gateway found a shard below its replica
target; with K >= 1 the exit is 1 unless lost, wrong and twice are 0 in every run. With `--acks
0` or `--ack-policy strict` (the counterfactuals) the figures are reported, not asserted
(RELIABILITY.md records them). Bounded: every wait has
a deadline (about a minute per run).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from payloadstore import Client, JobNotFound, PayloadStoreError, ResultTimeout, RetryPolicy
from payloadstore_devstack.services import LocalRedisCluster, MotoServer, create_payload_bucket
from payloadstore_devstack.services import local_aws_env as aws_env
from tests.reliability.run import CLIENT_THREADS, WORK, data_for, size_for
from tests.reliability.stack import (
    BUCKET,
    NAMESPACE,
    REGION,
    TOKEN_PATH,
    DaemonProcess,
    ReliabilityStack,
    Supervisor,
    mint_tokens,
)
from tests.reliability.worker import derived

log = logging.getLogger("reliability.failover")
STALL_S = 3.0
FILLER_MB = 32
VISIBILITY_TIMEOUT_S = 5
# Issue 32: with the old primary gone for good, every acknowledged job ends within this of the kill.
NEVER_RETURNS_DEADLINE_S = 120.0
RETURNS, NEVER_RETURNS = "returns", "never-returns"
# The default runs: (scenario, replicas per primary).
DEFAULT_RUNS = ((RETURNS, 1), (NEVER_RETURNS, 1), (NEVER_RETURNS, 2))


class ClusterStack(ReliabilityStack):
    """ReliabilityStack on a LocalRedisCluster instead of one redis-server (no proxy)."""

    cluster: LocalRedisCluster | None = None
    replicas: int = 1

    def start(self) -> ClusterStack:
        import boto3
        from botocore.config import Config

        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = LocalRedisCluster(
            data_dir=self.state_dir / "cluster", replicas=self.replicas
        ).start()
        self.moto = MotoServer(log_path=self.state_dir / "s3.log").start()
        os.environ.update(aws_env(self.moto.endpoint, REGION))
        self.s3 = boto3.client(
            "s3",
            endpoint_url=self.moto.endpoint,
            region_name=REGION,
            config=Config(signature_version="s3v4"),
        )
        create_payload_bucket(self.s3, BUCKET)
        ssm = boto3.client("ssm", endpoint_url=self.moto.endpoint, region_name=REGION)
        self.tokens = mint_tokens(ssm, TOKEN_PATH, namespaces=(NAMESPACE,))
        self.gateway = self._gateway(self.cluster.url, self.settings, "gateway.log")
        return self

    def stop(self) -> None:
        for part in (self.gateway, self.moto, self.cluster):
            if part is not None:
                with contextlib.suppress(Exception):  # stopping must go on
                    part.stop()


class Failover:
    def __init__(self, args: argparse.Namespace, scenario: str = RETURNS, replicas: int = 1):
        self.args = args
        self.scenario = scenario
        self.replicas = replicas
        base = Path(args.state_dir) if args.state_dir else None
        self.state_dir = (
            base / f"{scenario}-{replicas}"
            if base
            else Path(tempfile.mkdtemp(prefix="payloadstore-fo-"))
        )
        settings = {
            "REDIS_CLUSTER": "true",
            "REDIS_MIN_REPLICA_ACKS": str(args.acks),
            "REDIS_REPLICA_ACK_POLICY": args.ack_policy,
            "VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
            "POLL_MAX_WAIT_S": "2",
        }
        self.stack = ClusterStack(self.state_dir, settings)
        self.stack.replicas = replicas
        self.killed_at: float | None = None
        self.promoted_at: float | None = None
        self.last_result_at: float | None = None
        self.acked_after_promotion = 0
        self.jobs: dict[str, tuple[int, object | None]] = {}  # tag -> (size, job)
        self.lock = threading.Lock()
        self.submitted = 0
        self.events: list[str] = []
        self.t0 = time.monotonic()

    def client(self) -> Client:
        return Client(
            self.stack.endpoint,
            self.stack.token("client"),
            NAMESPACE,
            retry=RetryPolicy(max_attempts=12, max_backoff_s=2.0),
        )

    def event(self, what: str) -> None:
        line = f"{time.monotonic() - self.t0:6.1f}s {what}"
        self.events.append(line)
        log.info("%s", line)

    def load(self, thread_index: int, count: int) -> None:
        client = self.client()
        for i in range(count):
            index = thread_index + CLIENT_THREADS * i
            tag, size = f"f{index:05d}", size_for(index)
            job = None
            try:
                job = client.queue(WORK).add(tag, data_for(tag, size), mode="plain", sleep_s=0.0)
            except PayloadStoreError as e:
                log.warning("submit failed tag=%s error=%s", tag, e)
            with self.lock:
                self.jobs[tag] = (size, job)
                self.submitted += 1
                if job is not None and self.promoted_at is not None:
                    self.acked_after_promotion += 1
        client.close()

    def fault(self) -> None:
        from payloadstore_devstack.gateway import ensure_functions_on_path

        ensure_functions_on_path()
        from redis.cluster import RedisCluster

        from payloadstore_controlplane.store import keys

        cluster = self.stack.cluster
        assert cluster is not None
        deadline = time.monotonic() + 120
        while self.submitted < self.args.jobs // 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        with RedisCluster.from_url(cluster.url) as rc:
            primary = rc.get_node_from_key(keys.queue_names(NAMESPACE)).port
        replicas = [n["port"] for n in cluster.topology() if n["primary_port"] == primary]
        replica = replicas[0]
        cluster.stall(replica)
        self.event(f"replica {replica} stalled (SIGSTOP)")
        # Behind by more than the loopback socket buffers hold (else the stalled replica reads
        # every write from its kernel buffer on SIGCONT and nothing is lost): FILLER_MB into
        # the shard first, so the job writes that follow wait in the primary's output buffer.
        with RedisCluster.from_url(cluster.url) as rc:
            filler = next(
                f"filler:{i}"
                for i in range(10_000)
                if rc.get_node_from_key(f"filler:{i}").port == primary
            )
            for n in range(FILLER_MB):
                rc.set(f"{filler}:{n}", b"x" * (1 << 20), ex=600)
        self.event(f"{FILLER_MB} MiB written to primary {primary} behind the stalled replica")
        time.sleep(STALL_S)
        cluster.kill(primary)
        self.killed_at = time.monotonic()
        self.event(f"primary {primary} killed (SIGKILL) while replica {replica} is stalled")
        time.sleep(0.5)
        cluster.resume(replica)
        self.event(f"replica {replica} resumed (SIGCONT)")
        promoted = wait_any_promoted(cluster, replicas, 60)
        self.promoted_at = time.monotonic()
        self.event(f"replica {promoted} promoted")
        if self.scenario == NEVER_RETURNS:
            self.event(f"old primary {primary} never returns")
            others = [r for r in replicas if r != promoted]
            if others:
                # The other replica follows the promoted primary once the cluster tells it.
                cluster.wait_healthy(60)
                self.event(f"replica(s) {others} now follow the promoted primary {promoted}")
            return
        time.sleep(1.0)
        cluster.restart(primary)
        cluster.wait_healthy(60)
        self.event(f"old primary {primary} back as a replica; cluster healthy")

    def execute(self) -> int:
        self.stack.start()
        daemons = [DaemonProcess(f"d{i}", [WORK], 2, self.stack) for i in range(3)]
        supervisor = Supervisor(daemons).start()
        total = self.args.jobs
        shares = [total // CLIENT_THREADS + (i < total % CLIENT_THREADS) for i in range(4)]
        threads = [
            threading.Thread(target=self.load, args=(i, n), daemon=True)
            for i, n in enumerate(shares)
        ]
        fault = threading.Thread(target=self.fault, daemon=True)
        for t in [*threads, fault]:
            t.start()
        for t in [*threads, fault]:
            t.join(300)
        self.event(f"load submitted ({self.submitted} jobs)")
        verdicts = self.ledger()
        supervisor.stop()
        self.stack.stop()
        return self.report(verdicts)

    def ledger(self) -> collections.Counter:
        client = self.client()
        deadline = time.monotonic() + self.args.result_deadline_s
        if self.scenario == NEVER_RETURNS and self.killed_at is not None:
            deadline = self.killed_at + NEVER_RETURNS_DEADLINE_S
        runs: collections.Counter = collections.Counter()
        run_starts: dict[str, list[float]] = collections.defaultdict(list)
        verdicts: collections.Counter = collections.Counter()
        results = {}
        for tag, (size, job) in sorted(self.jobs.items()):
            if job is None:
                verdicts["not_acknowledged"] += 1
                continue
            try:
                value = client.job(job.job_id).result(timeout=max(1.0, deadline - time.monotonic()))
                results[tag] = "ok" if value == derived(tag, data_for(tag, size)) else "wrong"
            except (ResultTimeout, JobNotFound):
                results[tag] = "lost"
            except PayloadStoreError as e:
                results[tag] = "wrong"
                log.warning("job %s ended %s", tag, e)
        self.last_result_at = time.monotonic()
        time.sleep(1.0)  # late runs land in the run logs
        for path in (self.state_dir / "runs").glob("*.log"):
            for line in path.read_text().splitlines():
                if line.strip():
                    fields = line.split()
                    runs[fields[0]] += 1
                    run_starts[fields[0]].append(float(fields[2]))
        acked_at = self.results_acknowledged()
        for tag, result in results.items():
            verdicts[result] += 1
            if result == "ok" and runs[tag] > 1:
                job = self.jobs[tag][1]
                first_ack = acked_at.get(getattr(job, "job_id", ""))
                late = [t for t in run_starts[tag] if first_ack is not None and t > first_ack]
                verdicts["twice" if late else "rerun"] += 1
        client.close()
        return verdicts

    def results_acknowledged(self) -> dict[str, float]:
        """job id -> when its result post was first answered 204 (the gateway's request log)."""
        acked: dict[str, float] = {}
        pattern = re.compile(
            r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*method=POST "
            r"path=/v1/namespaces/[^/]+/jobs/([0-9A-Z]{26})/result status=204"
        )
        for line in (self.state_dir / "gateway.log").read_text().splitlines():
            m = pattern.match(line)
            if m:
                # logging's asctime is local time
                at = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
                acked.setdefault(m.group(3), at + int(m.group(2)) / 1000)
        return acked

    def below_target_lines(self) -> int:
        """How often the gateway logged a shard with fewer online replicas than the target."""
        path = self.state_dir / "gateway.log"
        text = path.read_text() if path.exists() else ""
        return text.count("redis replicas below target")

    def report(self, v: collections.Counter) -> int:
        for line in self.events:
            print(line)
        acks = self.args.acks
        shape = "old primary restarted" if self.scenario == RETURNS else "old primary never returns"
        print(
            f"failover: {len(self.jobs)} jobs, {v['ok']} ok, {v['lost']} lost, {v['wrong']} wrong, "
            f"{v['twice']} twice, {v['not_acknowledged']} not acknowledged, "
            f"{v['rerun']} rerun (acks={acks}, {self.args.ack_policy}, replicas={self.replicas}, "
            f"{shape}), "
            f"{time.monotonic() - self.t0:.0f} s"
        )
        if self.scenario == NEVER_RETURNS and self.killed_at is not None:
            promoted = (self.promoted_at or self.killed_at) - self.killed_at
            last = (self.last_result_at or self.killed_at) - self.killed_at
            acknowledged = len(self.jobs) - v["not_acknowledged"]
            print(
                f"failover never-returns: promoted {promoted:.1f} s after the kill; "
                f"{self.acked_after_promotion} jobs acknowledged after it; "
                f"{v['ok']} of {acknowledged} acknowledged jobs ended ok, the last result read "
                f"{last:.1f} s after the kill (deadline {NEVER_RETURNS_DEADLINE_S:.0f} s); a "
                f"shard below its replica target logged {self.below_target_lines()} time(s)"
            )
        bad = v["lost"] + v["wrong"] + v["twice"]
        asserted = acks >= 1 and self.args.ack_policy == "connected"
        if asserted and bad:
            print(f"state kept in {self.state_dir}")
            return 1
        if not self.args.keep:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return 0


def wait_any_promoted(cluster: LocalRedisCluster, replicas: list[int], timeout_s: float) -> int:
    """The port of whichever of `replicas` the cluster promoted (with two, the one that had
    not been stalled normally wins: the election favours the most caught-up replica)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in cluster.topology():
            if node["port"] in replicas and node["role"] == "primary":
                return node["port"]
        time.sleep(0.1)
    raise TimeoutError(f"none of the replicas {replicas} was promoted within {timeout_s} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make reliability-failover")
    parser.add_argument("--jobs", type=int, default=800)
    parser.add_argument("--acks", type=int, default=1, help="REDIS_MIN_REPLICA_ACKS")
    parser.add_argument(
        "--scenario",
        choices=(RETURNS, NEVER_RETURNS),
        default=None,
        help="one run of this scenario (default: returns on 1 replica, never-returns on 1 and 2)",
    )
    parser.add_argument(
        "--replicas", type=int, choices=(1, 2), default=None, help="replicas per primary"
    )
    parser.add_argument(
        "--ack-policy",
        choices=("connected", "strict"),
        default="connected",
        help="REDIS_REPLICA_ACK_POLICY (strict: the counterfactual of issue 32, reported only)",
    )
    parser.add_argument("--result-deadline-s", type=float, default=120.0)
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("payloadstore").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.scenario is None and args.replicas is None:
        runs = list(DEFAULT_RUNS)
    else:
        runs = [(args.scenario or RETURNS, args.replicas or 1)]
    worst = 0
    for scenario, replicas in runs:
        run = Failover(args, scenario, replicas)
        try:
            worst = max(worst, run.execute())
        except BaseException:
            run.stack.stop()
            raise
    return worst


if __name__ == "__main__":
    sys.exit(main())
