"""SSM failing under live tokens (issue 43): the authorizer answers from its last good listing
for a bounded time, and an alarm says so."""

from __future__ import annotations

import pytest

from infra.config import AUTHORIZER_FUNCTION
from infra.functions import function_logical_id
from tests.infra.cfn import resources

pytestmark = pytest.mark.infra


def test_a_stale_token_listing_alarms_and_its_bound_is_deployed(template):
    # Given the synthesized stack
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    # Then one alarm watches TokenListingStale (emitted by the authorizer while SSM fails), on
    # any count, and notifies the topic
    (alarm,) = [a for a in alarms if a["Properties"].get("MetricName") == "TokenListingStale"]
    assert alarm["Properties"]["Threshold"] == 0
    assert alarm["Properties"]["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Properties"]["TreatMissingData"] == "notBreaching"
    assert alarm["Properties"]["AlarmActions"]
    assert "SSM" in alarm["Properties"]["AlarmDescription"]
    # And the authorizer is deployed with the bound of the stale listing
    env = template["Resources"][function_logical_id(AUTHORIZER_FUNCTION)]["Properties"]
    assert env["Environment"]["Variables"]["TOKEN_STALE_MAX_S"] == "900"
