"""AWS list prices for us-east-1, in one table: the only prices the cost model uses.

Recorded by hand (there is no live fetching: `make cost` runs offline); each row names the AWS
pricing page it comes from. On-demand, no free tier, no savings plans or reserved nodes. Check
the pages before a budget decision and update the table (and READ) when a price changes.
"""

from __future__ import annotations

from dataclasses import dataclass

REGION = "us-east-1"
READ = "2026-12-03"


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str
    source: str  # the AWS pricing page


LAMBDA_PAGE = "AWS Lambda pricing"
APIGW_PAGE = "Amazon API Gateway pricing (REST APIs)"
CACHE_PAGE = "Amazon ElastiCache pricing (on-demand nodes, Redis OSS)"
VALKEY_PAGE = "Amazon ElastiCache pricing (on-demand nodes, Valkey: 20% below Redis OSS)"
SERVERLESS_PAGE = "Amazon ElastiCache pricing (ElastiCache Serverless)"
VPC_PAGE = "AWS PrivateLink pricing (interface endpoints)"
CW_PAGE = "Amazon CloudWatch pricing"
XRAY_PAGE = "AWS X-Ray pricing"
S3_PAGE = "Amazon S3 pricing (S3 Standard)"
SQS_PAGE = "Amazon SQS pricing (standard queues)"
SM_PAGE = "AWS Secrets Manager pricing"
KMS_PAGE = "AWS Key Management Service pricing"
NAT_PAGE = "Amazon VPC pricing (NAT gateway)"

PRICES: dict[str, Price] = {
    "lambda_gb_s_x86_64": Price(0.0000166667, "GB-second (x86_64)", LAMBDA_PAGE),
    "lambda_gb_s_arm64": Price(0.0000133334, "GB-second (arm64)", LAMBDA_PAGE),
    "lambda_request": Price(0.20 / 1e6, "request", LAMBDA_PAGE),
    "apigw_rest_request": Price(3.50 / 1e6, "REST API request (first 333 M/month)", APIGW_PAGE),
    "cache.t4g.micro": Price(0.016, "node-hour", CACHE_PAGE),
    "cache.t4g.small": Price(0.032, "node-hour", CACHE_PAGE),
    "cache.t4g.medium": Price(0.065, "node-hour", CACHE_PAGE),
    "cache.m7g.large": Price(0.158, "node-hour", CACHE_PAGE),
    "cache.r7g.large": Price(0.219, "node-hour", CACHE_PAGE),
    "valkey:cache.t4g.micro": Price(0.0128, "node-hour", VALKEY_PAGE),
    "valkey:cache.t4g.small": Price(0.0256, "node-hour", VALKEY_PAGE),
    "valkey:cache.t4g.medium": Price(0.052, "node-hour", VALKEY_PAGE),
    "valkey:cache.m7g.large": Price(0.1264, "node-hour", VALKEY_PAGE),
    "valkey:cache.r7g.large": Price(0.1752, "node-hour", VALKEY_PAGE),
    # Serverless: data stored (metered per GB-hour, at least 100 MB for Valkey, 1 GB for Redis
    # OSS) and ElastiCache Processing Units (1 ECPU per simple command of up to 1 KB).
    "serverless_valkey_gb_hour": Price(
        0.084, "GB-hour of data (Valkey, min 0.1 GB)", SERVERLESS_PAGE
    ),
    "serverless_valkey_ecpu": Price(0.0023 / 1e6, "ECPU (Valkey)", SERVERLESS_PAGE),
    "serverless_redis_gb_hour": Price(
        0.125, "GB-hour of data (Redis OSS, min 1 GB)", SERVERLESS_PAGE
    ),
    "serverless_redis_ecpu": Price(0.0034 / 1e6, "ECPU (Redis OSS)", SERVERLESS_PAGE),
    "interface_endpoint_hour": Price(0.01, "endpoint-hour per AZ", VPC_PAGE),
    "nat_gateway_hour": Price(0.045, "NAT gateway-hour", NAT_PAGE),
    "alarm_metric": Price(0.10, "standard-resolution alarm metric-month", CW_PAGE),
    "dashboard": Price(3.00, "dashboard-month", CW_PAGE),
    "custom_metric": Price(0.30, "metric-month (first 10,000)", CW_PAGE),
    "logs_ingest_gb": Price(0.50, "GB ingested (standard)", CW_PAGE),
    "xray_trace": Price(5.00 / 1e6, "trace recorded", XRAY_PAGE),
    "secret_month": Price(0.40, "secret-month", SM_PAGE),
    "kms_key_month": Price(1.00, "customer managed key-month", KMS_PAGE),
    "s3_gb_month": Price(0.023, "GB-month (first 50 TB)", S3_PAGE),
    "s3_put": Price(0.005 / 1000, "PUT, COPY, POST, LIST request", S3_PAGE),
    "s3_get": Price(0.0004 / 1000, "GET, HEAD and other request", S3_PAGE),
    "sqs_request": Price(0.40 / 1e6, "request (each 64 KiB chunk of a payload)", SQS_PAGE),
}


def price(name: str) -> float:
    return PRICES[name].usd
