"""EventBridge rules for the functions that run on a timer (routes.SCHEDULES)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from payloadstore_controlplane.routes import SCHEDULES


class Schedules(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, functions: dict[str, lambda_.IFunction]
    ) -> None:
        super().__init__(scope, construct_id)
        self.rules: dict[str, events.Rule] = {}
        for schedule in SCHEDULES:
            rule = events.Rule(
                self,
                f"{schedule.function.capitalize()}Schedule",
                description=f"payloadstore: run the {schedule.function} function "
                f"every {schedule.every_minutes} min",
                schedule=events.Schedule.rate(cdk.Duration.minutes(schedule.every_minutes)),
            )
            # A missed minute is replaced by the next one: no retries, no dead-letter queue.
            rule.add_target(
                targets.LambdaFunction(
                    functions[schedule.function],
                    retry_attempts=0,
                    max_event_age=cdk.Duration.minutes(1),
                )
            )
            self.rules[schedule.function] = rule
