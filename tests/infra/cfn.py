"""Reading a synthesized CloudFormation template the way a reviewer does."""

from __future__ import annotations

from typing import Any


def render(value: Any) -> Any:
    """Intrinsics as readable strings: {"Fn::GetAtt": ["B", "Arn"]} -> "<B.Arn>", Ref -> "<X>",
    Fn::Join -> the joined string. Plain values come back unchanged."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            return f"<{arg}>"
        if key == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if key == "Fn::Join":
            sep, parts = arg
            return sep.join(str(render(p)) for p in parts)
        if key == "Fn::Sub":
            return arg if isinstance(arg, str) else arg[0]
    if isinstance(value, list):
        return [render(v) for v in value]
    return value


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def resources(template: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def role_statements(template: dict, role_id: str) -> list[dict]:
    """Every statement of every inline/attached AWS::IAM::Policy of a role."""
    out: list[dict] = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    role = template["Resources"][role_id]
    for inline in role["Properties"].get("Policies", []):
        out.extend(inline["PolicyDocument"]["Statement"])
    return out


def api_paths(template: dict) -> dict[str, str]:
    """Logical id of each AWS::ApiGateway::Resource -> its full path ("/v1/config")."""
    res = resources(template, "AWS::ApiGateway::Resource")
    paths: dict[str, str] = {}

    def path_of(rid: str) -> str:
        if rid not in paths:
            props = res[rid]["Properties"]
            parent = props["ParentId"]
            prefix = path_of(parent["Ref"]) if "Ref" in parent else ""
            paths[rid] = f"{prefix}/{props['PathPart']}"
        return paths[rid]

    for rid in res:
        path_of(rid)
    return paths


def integrated_function(method: dict) -> str:
    """Logical id of the Lambda function a proxy method invokes."""
    uri = method["Properties"]["Integration"]["Uri"]
    for part in uri["Fn::Join"][1]:
        if isinstance(part, dict) and "Fn::GetAtt" in part:
            return part["Fn::GetAtt"][0]
    raise AssertionError(f"no function in integration uri {uri}")
