"""Checking an AWS Signature Version 4, as Bedrock's front door does.

The signature is recomputed with botocore's own ``SigV4Auth`` (the signer the ``anthropic``
SDK and boto3 use) from what arrived: the method, the path exactly as sent (the raw,
still-percent-encoded path: botocore encodes it once more for the canonical URI, so a
model id's ``:`` is ``%253A`` there), the query, the headers the ``Authorization`` header
names in ``SignedHeaders``, the body and ``X-Amz-Date``; with the one known identity
(``SimulatorConfig.aws_*``). The order and the refusals follow AWS's: no credentials at all,
an unknown access key, a date outside the allowed skew, a credential scope for another
region or service, then a signature mismatch -- each a 403 with AWS's wording.

botocore is imported only when a signed request arrives: it is the ``bedrock`` extra's
dependency, not the simulator's.
"""

from __future__ import annotations

import datetime
import hmac
import re
from collections.abc import Sequence
from typing import Final, final

_ALGORITHM: Final = "AWS4-HMAC-SHA256"
_FIELDS: Final = re.compile(r"(Credential|SignedHeaders|Signature)=([^,\s]+)")
_DATE_FORMAT: Final = "%Y%m%dT%H%M%SZ"


@final
class SignatureRefused(Exception):
    """A 403 from the signature check: AWS's ``x-amzn-ErrorType`` and message."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def check_sigv4(
    *,
    method: str,
    url: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    max_skew_s: float,
    now: datetime.datetime | None = None,
) -> None:
    """Verify the request's SigV4 ``Authorization`` header.

    Args:
      url: ``scheme://host`` plus the raw path and query as received.
      headers: every received header (name, value).

    Raises:
      SignatureRefused: the request is not signed by ``access_key``/``secret_key`` for
        ``service`` in ``region`` within ``max_skew_s`` of ``now``.
    """
    lowered = [(name.lower(), value) for name, value in headers]
    authorization = next((v for n, v in lowered if n == "authorization"), "")
    if not authorization.startswith(_ALGORITHM + " "):
        raise SignatureRefused(
            "MissingAuthenticationTokenException", "Missing Authentication Token"
        )
    fields = dict(_FIELDS.findall(authorization))
    if set(fields) != {"Credential", "SignedHeaders", "Signature"}:
        raise SignatureRefused(
            "IncompleteSignatureException",
            "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature'.",
        )
    key_id, _, scope = fields["Credential"].partition("/")
    if not hmac.compare_digest(key_id.encode(), access_key.encode()):
        raise SignatureRefused(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    amz_date = next((v for n, v in lowered if n == "x-amz-date"), "")
    try:
        signed_at = datetime.datetime.strptime(amz_date, _DATE_FORMAT).replace(tzinfo=datetime.UTC)
    except ValueError:
        raise SignatureRefused(
            "IncompleteSignatureException", "Date must be in ISO-8601 'basic format'."
        ) from None
    now = now or datetime.datetime.now(datetime.UTC)
    skew = datetime.timedelta(seconds=max_skew_s)
    if signed_at < now - skew:
        raise SignatureRefused(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than "
            f"{(now - skew).strftime(_DATE_FORMAT)} ({now.strftime(_DATE_FORMAT)} - "
            f"{max_skew_s / 60:g} min.)",
        )
    if signed_at > now + skew:
        raise SignatureRefused(
            "InvalidSignatureException",
            f"Signature not yet current: {amz_date} is still later than "
            f"{(now + skew).strftime(_DATE_FORMAT)} ({now.strftime(_DATE_FORMAT)} + "
            f"{max_skew_s / 60:g} min.)",
        )
    parts = scope.split("/")
    if len(parts) != 4 or parts[3] != "aws4_request" or parts[0] != amz_date[:8]:
        raise SignatureRefused(
            "InvalidSignatureException", "Credential should be scoped correctly."
        )
    if parts[1] != region:
        raise SignatureRefused(
            "InvalidSignatureException",
            f"Credential should be scoped to a valid region, not '{parts[1]}'.",
        )
    if parts[2] != service:
        raise SignatureRefused(
            "InvalidSignatureException",
            f"Credential should be scoped to correct service: '{service}'.",
        )
    signed_names = fields["SignedHeaders"].split(";")
    if "host" not in signed_names:
        raise SignatureRefused(
            "InvalidSignatureException", "'Host' must be a 'SignedHeader' in the AWS Authorization."
        )
    expected = _signature(
        method, url, lowered, signed_names, body, access_key, secret_key, region, service, amz_date
    )
    if not hmac.compare_digest(expected.encode(), fields["Signature"].encode()):
        raise SignatureRefused(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.",
        )


def _signature(
    method: str,
    url: str,
    headers: list[tuple[str, str]],
    signed_names: list[str],
    body: bytes,
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    amz_date: str,
) -> str:
    """botocore's signature for the request as received, at its own ``X-Amz-Date``."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    wanted = set(signed_names)
    signed = [(name, value) for name, value in headers if name in wanted]
    request = AWSRequest(method=method.upper(), url=url, data=body)
    for name, value in signed:
        request.headers[name] = value  # an email Message: a repeated name is kept twice
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(access_key, secret_key), service, region)
    canonical = signer.canonical_request(request)
    string_to_sign = signer.string_to_sign(request, canonical)
    return str(signer.signature(string_to_sign, request))
