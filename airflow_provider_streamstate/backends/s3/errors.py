"""botocore's failures as the engine's errors: one line, what to fix, and whether to retry.

Configuration errors (a malformed endpoint, an unknown profile, half a key pair, an
unparsable config file) cannot be fixed by retrying: they name the AWS_* variable, or
the field of the Airflow connection, to change. A connection that breaks, times out or
is cut while a body is read is transient: a retry may succeed.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from airflow_provider_streamstate.engine.core.errors import (
    NotFoundError,
    StreamstateError,
    TransientError,
    UsageError,
)

ENV_HINT = "the AWS_* environment variables, AWS_CONFIG_FILE or AWS_SHARED_CREDENTIALS_FILE"


def one_line(text: object, limit: int = 300) -> str:
    """botocore's messages can span lines (parameter reports, parse errors): squeeze them."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def status(exc: BaseException) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _where(conn_id: str | None, env: str, field: str) -> str:
    """The setting to change: an environment variable, or a field of the Airflow connection."""
    return f"{field} of Airflow connection {conn_id!r}" if conn_id else env


def _endpoint_setting(conn_id: str | None) -> str | None:
    """Where the S3 endpoint came from, if it was set at all."""
    if conn_id:
        return _where(conn_id, "", "endpoint_url in the extra")
    for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(var):
            return var
    return None


def configuration_error(exc: BaseException, *, conn_id: str | None = None) -> UsageError | None:
    """A UsageError naming the setting to fix when `exc` is a boto3 configuration error, else None.

    `conn_id` says the client came from that Airflow connection rather than the environment.
    """
    from botocore import exceptions as bx

    source = f"Airflow connection {conn_id!r}" if conn_id else "the AWS environment"
    if isinstance(exc, ValueError) and str(exc).startswith("Invalid endpoint"):
        endpoint = str(exc).split(":", 1)[-1].strip()
        return UsageError(
            f"invalid S3 endpoint URL {endpoint!r} from {source}",
            hint=f"set {_endpoint_setting(conn_id) or 'endpoint_url in the AWS profile'} to a full URL with its scheme, e.g. http://127.0.0.1:9000",
        )
    if isinstance(exc, bx.ProfileNotFound):
        profile = exc.kwargs.get("profile", "")
        return UsageError(
            f"AWS profile {profile!r} from {source} is not in AWS_CONFIG_FILE or AWS_SHARED_CREDENTIALS_FILE",
            hint=f"fix {_where(conn_id, 'AWS_PROFILE', 'profile_name in the extra')} (or unset it), "
            "or add the profile (`aws configure --profile NAME`)",
        )
    if isinstance(exc, bx.InvalidRegionError | bx.UnknownRegionError | bx.NoRegionError):
        region = exc.kwargs.get("region_name", "")
        return UsageError(
            f"invalid AWS region {region!r} from {source}",
            hint=f"set {_where(conn_id, 'AWS_DEFAULT_REGION', 'region_name in the extra')} to a region "
            "such as us-east-1 (or the profile's region in AWS_CONFIG_FILE)",
        )
    if isinstance(exc, bx.PartialCredentialsError):
        provider, missing = exc.kwargs.get("provider", ""), exc.kwargs.get("cred_var", "")
        if conn_id:
            hint = f"give Airflow connection {conn_id!r} both a login (key id) and a password (secret key)"
        elif provider == "env":
            hint = f"set {missing} too, or unset both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        else:
            hint = f"add {missing} to the profile (AWS_PROFILE) in AWS_SHARED_CREDENTIALS_FILE or AWS_CONFIG_FILE"
        origin = {"env": "the environment", "shared-credentials-file": "AWS_SHARED_CREDENTIALS_FILE",
                  "config-file": "AWS_CONFIG_FILE"}.get(provider, provider or source)
        return UsageError(f"partial AWS credentials from {origin}: {missing} is missing", hint=hint)
    if isinstance(exc, bx.ConfigParseError | bx.ConfigNotFound):
        path, detail = exc.kwargs.get("path", ""), exc.kwargs.get("error", "")
        return UsageError(
            f"cannot parse AWS config file {path}" + (f": {one_line(detail)}" if detail else ""),
            hint="fix the file, or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE at a valid one",
        )
    if isinstance(exc, bx.InvalidConfigError):
        return UsageError(
            f"invalid AWS profile configuration: {one_line(exc)}",
            hint=f"fix the profile that {_where(conn_id, 'AWS_PROFILE', 'profile_name in the extra')} "
            "names in AWS_CONFIG_FILE (default ~/.aws/config)",
        )
    if isinstance(
        exc,
        bx.CredentialRetrievalError | bx.UnknownCredentialError | bx.SSOError | bx.TokenRetrievalError | bx.LoginError,
    ):
        return UsageError(
            f"cannot get AWS credentials from {source}: {one_line(exc)}",
            hint="fix the profile's credential source (credential_process, sso_session, role_arn), "
            "or log in again (`aws sso login`)",
        )
    if isinstance(
        exc,
        bx.InvalidRetryConfigurationError | bx.InvalidS3AddressingStyleError | bx.InvalidDefaultsMode
        | bx.InvalidProxiesConfigError | bx.InvalidChecksumConfigError | bx.InvalidEndpointConfigurationError
        | bx.InvalidS3UsEast1RegionalEndpointConfigError | bx.InvalidSTSRegionalEndpointsConfigError
        | bx.InvalidIMDSEndpointError | bx.InvalidIMDSEndpointModeError | bx.UnsupportedS3ConfigurationError
        | bx.UnknownSignatureVersionError | bx.UnsupportedSignatureVersionError,
    ):
        return UsageError(
            f"invalid AWS configuration from {source}: {one_line(exc)}",
            hint=f"fix {_where(conn_id, ENV_HINT, 'the extra (config_kwargs)')}",
        )
    return None


def client_error(exc: BaseException, *, conn_id: str | None = None) -> StreamstateError:
    """What building a client failed with: every such failure is about configuration."""
    known = configuration_error(exc, conn_id=conn_id)
    if known is not None:
        return known
    source = f"Airflow connection {conn_id!r}" if conn_id else "the AWS environment"
    return UsageError(
        f"cannot configure an S3 client from {source}: {type(exc).__name__}: {one_line(exc)}",
        hint=f"fix {_where(conn_id, ENV_HINT, 'the settings')}",
    )


def _botocore_version() -> str:
    import botocore

    return str(getattr(botocore, "__version__", "?"))


def request_error(exc: BaseException, *, what: str, url: str, bucket: str, conn_id: str | None = None) -> StreamstateError:
    """An S3 call that failed, as an engine error. `what` reads "upload f", "read blob ab12..."."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ParamValidationError

    if isinstance(exc, NoCredentialsError):
        hint = (
            f"give Airflow connection {conn_id!r} credentials (login and password, or role_arn in its extra)"
            if conn_id
            else "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), "
            "or name an Airflow AWS connection with --storage-conn-id"
        )
        return StreamstateError(f"no AWS credentials to {what} in {url}", hint=hint)
    if isinstance(exc, ParamValidationError):
        report = (str(exc.kwargs.get("report", exc)).strip().splitlines() or [""])[0].split(", must be one of")[0]
        return StreamstateError(
            f"botocore {_botocore_version()} cannot {what} in {url}: {one_line(report)}",
            hint="upgrade boto3 and botocore (pip install -U boto3 botocore): the store needs "
            "S3 conditional writes (IfNoneMatch), which older releases do not know",
        )
    if isinstance(exc, ClientError):
        c, s = code(exc), status(exc)
        if c == "NoSuchBucket":
            return NotFoundError(f"bucket {bucket} does not exist ({what})", hint="create it or fix the store URL")
        if c in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return StreamstateError(f"access denied to {what} in {url} ({c})", hint="check the credentials and bucket policy")
        if c in ("AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException"):
            return UsageError(
                f"S3 refused to {what} in {url}: the bucket is in another region ({c})",
                hint=f"set {_where(conn_id, 'AWS_DEFAULT_REGION', 'region_name in the extra')} to the bucket's region",
            )
        if c == "NotImplemented" or s == 501:
            return StreamstateError(
                f"the S3 endpoint cannot {what} in {url}: it does not implement a feature the store needs ({c or s})",
                hint="use an S3 endpoint with conditional writes (If-None-Match), such as AWS S3 or a recent MinIO",
            )
        if s >= 500 or c in ("SlowDown", "RequestTimeout", "ConditionalRequestConflict"):
            return TransientError(f"S3 failed to {what} in {url}: {c or s}", hint="retry; S3 or the network was busy")
        return StreamstateError(f"S3 refused to {what} in {url}: {c or s} {one_line(exc)}")
    if isinstance(exc, BotoCoreError | ValueError):
        known = configuration_error(exc, conn_id=conn_id)
        if known is not None:
            return known
    setting = _endpoint_setting(conn_id)
    return TransientError(
        f"cannot reach S3 to {what} in {url}: {one_line(exc)}",
        hint=f"check the network{f' and the endpoint ({setting})' if setting else ''}, then retry",
    )


def stream_error(exc: BaseException, *, what: str, url: str) -> TransientError:
    """A response body cut while it was read (reset, timeout, short read): reading it again may work."""
    return TransientError(
        f"the connection to S3 broke while reading {what} from {url}: {type(exc).__name__}: {one_line(exc)}",
        hint="retry; if it keeps failing, check the network and the S3 endpoint",
    )


def is_stream_error(exc: BaseException) -> bool:
    """Whether `exc`, raised while a response body was read, is the network failing under it."""
    from botocore.exceptions import BotoCoreError
    from urllib3.exceptions import HTTPError as Urllib3Error

    return isinstance(exc, BotoCoreError | Urllib3Error | ConnectionError | TimeoutError)


@contextmanager
def stream_errors(what: str, url: str) -> Iterator[None]:
    """Errors of a response body cut while it is read, as `stream_error`s."""
    try:
        yield
    except Exception as exc:
        if is_stream_error(exc):
            raise stream_error(exc, what=what, url=url) from None
        raise


class S3Body(io.RawIOBase):
    """A GetObject body whose reads raise the caller's one-line errors (`errors`: a context
    manager around each read), never urllib3's or botocore's, when the connection breaks
    mid-stream (reset, timeout, fewer bytes than announced)."""

    def __init__(self, body: Any, errors: Callable[[], AbstractContextManager[Any]]) -> None:
        super().__init__()
        self._body, self._errors = body, errors

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        with self._errors():
            return bytes(self._body.read(None if size is None or size < 0 else size))

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._body.close()
            finally:
                super().close()
