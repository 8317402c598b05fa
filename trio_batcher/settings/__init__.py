"""Every knob of the gateway, declared once: the typed, validated ``Settings`` object read from
the environment and overridable by flags (``_model``), the table that declares each knob
(``_specs``) and the value parsers it names (``_parsers``). Settings are data: this package
imports no other part of the gateway.
"""

from __future__ import annotations

from ._model import ANTHROPIC_VERSIONS as ANTHROPIC_VERSIONS
from ._model import SPECS as SPECS
from ._model import Settings as Settings
from ._model import SettingsError as SettingsError
from ._model import SettingSpec as SettingSpec
from ._parsers import header_secrets as header_secrets

__all__ = [
    "ANTHROPIC_VERSIONS",
    "SPECS",
    "SettingSpec",
    "Settings",
    "SettingsError",
    "header_secrets",
]
