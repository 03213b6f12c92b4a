"""Who the caller is, as the emulator answers it: an assumed SageMaker execution role, every action allowed.

SDK v3 asks AWS two identity questions before it submits a job: ``sts:GetCallerIdentity`` (through
``get_execution_role()`` and ``default_bucket()``), and — when ``ModelTrainer`` validates its
role — ``iam:SimulatePrincipalPolicy`` for the role's permissions and ``iam:GetRole`` for its trust
policy. moto answers the first with an IAM *user* (so ``get_execution_role()`` refuses it) and does
not implement ``SimulatePrincipalPolicy`` at all. :func:`answer_identity` registers botocore
``before-call`` handlers on one STS or IAM client so that:

* ``GetCallerIdentity`` is the assumed role ``SageMakerEmulatorRole`` of moto's account (as inside
  SageMaker Studio or a notebook instance);
* ``SimulatePrincipalPolicy`` allows every action asked about (the emulator enforces no IAM);
* ``GetRole`` returns any role name asked about, trusting ``sagemaker.amazonaws.com`` (any role a
  launcher names is accepted, as with the SDK v2 session).

Every other IAM/STS call goes on to moto. Only clients made by the emulator's own boto3 session
get these handlers; nothing is sent to AWS either way.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from .s3 import ACCOUNT

#: The role every emulated job reports and the caller is assumed to be.
ROLE_NAME = "SageMakerEmulatorRole"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE_NAME}"
SESSION_NAME = "sagemaker-emulator"
CALLER_ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE_NAME}/{SESSION_NAME}"
#: The trust policy of every role the emulator describes (SageMaker may assume it).
TRUST_POLICY = {"Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"},
                               "Action": "sts:AssumeRole"}]}


def _role_id(name: str) -> str:
    return "AROA" + hashlib.sha256(name.encode()).hexdigest()[:17].upper()


def _caller_identity(params: dict[str, Any]) -> dict[str, Any]:
    return {"UserId": f"{_role_id(ROLE_NAME)}:{SESSION_NAME}", "Account": ACCOUNT, "Arn": CALLER_ARN}


def _simulate(params: dict[str, Any]) -> dict[str, Any]:
    actions = params.get("ActionNames") or []
    resources = params.get("ResourceArns") or ["*"]
    return {"IsTruncated": False,
            "EvaluationResults": [{"EvalActionName": a, "EvalResourceName": resources[0],
                                   "EvalDecision": "allowed", "MatchedStatements": [],
                                   "MissingContextValues": []} for a in actions]}


def _get_role(params: dict[str, Any]) -> dict[str, Any]:
    name = str(params.get("RoleName", ""))
    return {"Role": {"Path": "/", "RoleName": name, "RoleId": _role_id(name),
                     "Arn": f"arn:aws:iam::{ACCOUNT}:role/{name}",
                     "CreateDate": datetime(2024, 1, 1, tzinfo=timezone.utc),
                     # as IAM sends it: URL-quoted JSON (botocore's after-call handler decodes it)
                     "AssumeRolePolicyDocument": quote(json.dumps(TRUST_POLICY)), "MaxSessionDuration": 3600}}


_ANSWERS = {("sts", "GetCallerIdentity"): _caller_identity,
            ("iam", "SimulatePrincipalPolicy"): _simulate,
            ("iam", "GetRole"): _get_role}


def answer_identity(client: Any) -> Any:
    """Register the handlers above on ``client`` (an STS or IAM client); return it."""
    from botocore.awsrequest import AWSResponse

    service = client.meta.service_model.service_id.hyphenize()
    for (svc, operation), answer in _ANSWERS.items():
        if svc != service:
            continue

        def handler(params: dict[str, Any], answer: Any = answer, **_: Any) -> tuple[Any, dict[str, Any]]:
            return AWSResponse("https://sagemaker-emulator.invalid/", 200, {}, None), answer(_api_params(params))

        client.meta.events.register(f"before-call.{svc}.{operation}", handler)
    return client


def _api_params(request_dict: dict[str, Any]) -> dict[str, Any]:
    """The operation's parameters from botocore's serialised request (query protocol: flat keys)."""
    body = request_dict.get("body") or {}
    if not isinstance(body, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in body.items():
        name, _, member = key.partition(".member.")
        if member:
            out.setdefault(name, []).append(value)
        else:
            out[key] = value
    return out
