"""The delivery cap's alarm: any job failed DeliveryLimitExceeded notifies the alarm topic."""

from __future__ import annotations

from tests.infra.cfn import resources


def test_given_the_stack_then_a_delivery_limit_exceeded_job_raises_an_alarm_like_payload_corrupt(
    template,
):
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    (corrupt,) = [a for a in alarms if a.get("MetricName") == "PayloadCorrupt"]
    (alarm,) = [a for a in alarms if a.get("MetricName") == "DeliveryLimitExceeded"]
    # The same namespace, dimensions and topic as the functions' other custom metric
    assert alarm["Namespace"] == corrupt["Namespace"]
    assert alarm["Dimensions"] == corrupt["Dimensions"]
    assert alarm["AlarmActions"] == corrupt["AlarmActions"] and alarm["AlarmActions"]
    # Any one job past the cap alarms
    assert (alarm["Statistic"], alarm["Threshold"]) == ("Sum", 0)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
