"""Which values are secrets, and their redacted form, for everything the engine writes down.

A stream's Spark confs, environment and arguments carry credentials (an S3 secret key, a
Kafka SASL password, a token): the launcher needs them to start the driver, but the launch
record beside the checkpoint, the driver log header, reports and anything shown to people
must not hold them. One rule decides, the same in the engine and in Airflow tasks (which
also register the values with Airflow's secrets masker): a name is sensitive when it holds
one of Airflow's sensitive words (secret, password, token, access_key, api_key,
private_key, passphrase, ...), or `credential`, or `jaas` (a SASL JAAS config embeds its
password), or `key` as a word of its own (`fs.s3a.secret.key`, `ssl.key.password`,
`AWS_SESSION_KEY`) — `keytab` or `keystore.type` are not.

Pure Python: no Airflow import (the word list is Airflow's, kept here so the engine and a
CLI without Airflow apply the same rule).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "***"

# Airflow's DEFAULT_SENSITIVE_FIELDS, plus what the engine must hide besides.
_WORDS = (
    "access_key", "access_token", "api_key", "apikey", "auth_header", "authorization", "bearer",
    "connection_string", "dsn", "passphrase", "passwd", "password", "private_key", "proxy_password",
    "secret", "service_account", "service_key", "token", "keyfile_dict", "webhook_url",
    "credential", "jaas",
)
_SENSITIVE = re.compile(
    "|".join(re.escape(w).replace("_", "[._-]?") for w in _WORDS) + r"|(?:^|[._-])key(?:$|[._-])",
    re.IGNORECASE,
)


def is_sensitive(name: str) -> bool:
    """Whether a conf key, environment variable or option named `name` holds a secret."""
    return bool(_SENSITIVE.search(name))


def redact_mapping(values: Mapping[str, str]) -> dict[str, str]:
    """`values` with every sensitive entry's value replaced by `***`."""
    return {k: (REDACTED if is_sensitive(k) else v) for k, v in values.items()}


def sensitive_values(*, conf: Mapping[str, str] = {}, env: Mapping[str, str] = {},
                     args: Sequence[str] = ()) -> list[str]:
    """The secret values among a stream's confs, environment and arguments (an argument is
    secret when it follows an option with a sensitive name, or is a `NAME=VALUE` pair with
    one: `--password=x`, `kafka.sasl.password=x`, a `--conf` pair)."""
    found = [v for k, v in (*conf.items(), *env.items()) if is_sensitive(k) and v]
    for i, arg in enumerate(args):
        if "=" in arg:
            name, _, value = arg.partition("=")
            if is_sensitive(name) and value:
                found.append(value)
        elif arg.startswith("-") and is_sensitive(arg) and i + 1 < len(args):
            found.append(args[i + 1])
    return list(dict.fromkeys(found))


def redact_command(command: Sequence[str], *, secrets: Sequence[str] = ()) -> list[str]:
    """A command line fit to write down: `--conf KEY=VALUE` and `KEY=VALUE` pairs with a
    sensitive key, the value after an option with a sensitive name, and any occurrence of
    one of `secrets` (values known to be secret, wherever they appear) become `***`."""
    out: list[str] = []
    hide_next = False
    for arg in command:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if eq and is_sensitive(name):
            out.append(f"{name}={REDACTED}")
            continue
        if arg.startswith("-") and not eq and is_sensitive(arg):
            hide_next = True
        out.append(redact_text(arg, secrets))
    return out


def redact_text(text: str, secrets: Sequence[str]) -> str:
    """`text` with every occurrence of one of `secrets` replaced by `***` (longest first,
    so a secret that contains another is hidden whole)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
