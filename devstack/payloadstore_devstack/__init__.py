"""The local stack: a real redis-server, S3 (and SSM) over HTTP from moto's server, and a
local API gateway serving the deployed Lambda handlers. Used by `make dev`, tests and benchmarks."""
