"""Google's OAuth token endpoint for service accounts, and the access tokens it issues.

google-auth's service-account credentials sign a JWT assertion (RS256, ``iss`` the account's
``client_email``, ``aud`` the ``token_uri``, ``scope``, ``iat``/``exp`` at most an hour apart)
with the account's private key (``aud`` is Google's endpoint or the ``token_uri``) and POST it to the JSON's ``token_uri`` as
``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=...``. Pointing
``token_uri`` at the simulator's ``POST /token`` lets a test run the real flow: the
assertion is verified with the configured public key (``SimulatorConfig.vertex_*``), and an
opaque access token with ``expires_in`` comes back. Refusals are Google's
``{"error": "invalid_grant", "error_description": ...}`` (400).

Tokens live in memory for ``vertex_token_lifetime_s`` (``time.monotonic``); Vertex routes
ask ``check`` whether a bearer token is one of them and unexpired. ``cryptography`` (a
dependency of google-auth, the ``vertex`` extra) is imported only when an assertion arrives.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections import OrderedDict
from typing import Any, Final, final

JWT_BEARER: Final = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# google-auth addresses every assertion to Google's endpoint, whatever the ``token_uri``.
GOOGLE_TOKEN_URI: Final = "https://oauth2.googleapis.com/token"
CLOUD_PLATFORM: Final = "https://www.googleapis.com/auth/cloud-platform"
MAX_TOKENS: Final = 10_000
# Google accepts assertions issued up to a few minutes off its clock.
_CLOCK_SKEW_S: Final = 300


@final
class GrantRefused(Exception):
    """A 400 ``invalid_grant`` (or another OAuth error) from the token endpoint."""

    def __init__(self, description: str, error: str = "invalid_grant") -> None:
        super().__init__(description)
        self.error = error
        self.description = description


@final
class GoogleTokens:
    """Issues access tokens for signed assertions and checks them later."""

    def __init__(self, client_email: str | None, public_key_pem: str | None, lifetime_s: float):
        self._email = client_email
        self._key_pem = public_key_pem
        self._lifetime_s = lifetime_s
        self._tokens: OrderedDict[str, float] = OrderedDict()

    def exchange(self, form: dict[str, str], audience: str) -> dict[str, Any]:
        """The token response for a ``jwt-bearer`` grant addressed to ``audience``.

        Raises:
          GrantRefused: wrong grant type, a malformed, mis-signed, mis-addressed or expired
            assertion, or an unknown account.
        """
        if form.get("grant_type") != JWT_BEARER:
            raise GrantRefused("Invalid grant_type.", "unsupported_grant_type")
        claims = self._verified_claims(form.get("assertion", ""))
        now = time.time()
        if claims.get("iss") != self._email:
            raise GrantRefused("Invalid JWT Signature.")
        if claims.get("aud") not in (audience, GOOGLE_TOKEN_URI):
            raise GrantRefused("Invalid JWT: Failed audience check.")
        iat, exp = claims.get("iat"), claims.get("exp")
        if (
            not isinstance(iat, int | float)
            or not isinstance(exp, int | float)
            or iat > now + _CLOCK_SKEW_S
            or exp < now - _CLOCK_SKEW_S
            or exp - iat > 3600
        ):
            raise GrantRefused(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a "
                "reasonable timeframe. Check your iat and exp values in the JWT claim."
            )
        if CLOUD_PLATFORM not in str(claims.get("scope", "")).split():
            raise GrantRefused(
                "Invalid OAuth scope or ID token audience provided.", "invalid_scope"
            )
        token = "ya29.sim" + base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        self._tokens[token] = time.monotonic() + self._lifetime_s
        if len(self._tokens) > MAX_TOKENS:
            self._tokens.popitem(last=False)
        return {
            "access_token": token,
            "expires_in": int(self._lifetime_s),
            "token_type": "Bearer",
        }

    def check(self, token: str) -> str | None:
        """Why ``token`` is refused (Google's wording), or ``None`` if it is valid."""
        expiry = self._tokens.get(token)
        if expiry is None:
            return (
                "Request had invalid authentication credentials. Expected OAuth 2 access "
                "token, login cookie or other valid authentication credential. See "
                "https://developers.google.com/identity/sign-in/web/devconsole-project."
            )
        if time.monotonic() >= expiry:
            return "Request had invalid authentication credentials. The access token expired."
        return None

    def _verified_claims(self, assertion: str) -> dict[str, Any]:
        parts = assertion.split(".")
        if len(parts) != 3:
            raise GrantRefused("Invalid JWT: malformed assertion.")
        try:
            header = json.loads(_unb64(parts[0]))
            claims = json.loads(_unb64(parts[1]))
            signature = _unb64(parts[2])
        except (ValueError, binascii.Error):
            raise GrantRefused("Invalid JWT: malformed assertion.") from None
        if not isinstance(header, dict) or header.get("alg") != "RS256":
            raise GrantRefused("Invalid JWT: unsupported algorithm.")
        if not isinstance(claims, dict) or self._key_pem is None:
            raise GrantRefused("Invalid JWT Signature.")
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa

        key = serialization.load_pem_public_key(self._key_pem.encode())
        if not isinstance(key, rsa.RSAPublicKey):
            raise GrantRefused("Invalid JWT Signature.")
        try:
            key.verify(
                signature,
                f"{parts[0]}.{parts[1]}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except InvalidSignature:
            raise GrantRefused("Invalid JWT Signature.") from None
        return claims


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
