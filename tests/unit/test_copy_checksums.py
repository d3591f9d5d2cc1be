"""Which CopyObjects a server-side copy sends to learn the copy's SHA-256
(`backends.s3.clients.copy_with_sha256`): a plain one when the source carries a full-object checksum,
one asking S3 to compute it otherwise, and never a composite checksum (of a multipart
upload's parts) taken for the object's sha256."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from airflow_provider_streamstate.backends.s3.clients import copy_with_sha256

DIGEST = hashlib.sha256(b"bytes").digest()
FULL = {"ChecksumSHA256": base64.b64encode(DIGEST).decode()}


def copier(*responses: dict[str, Any]) -> tuple[list[bool], Any]:
    """A CopyObject that answers `responses` in turn, and what each call asked."""
    asked: list[bool] = []

    def copy(ask: bool) -> dict[str, Any]:
        asked.append(ask)
        return {"CopyObjectResult": responses[len(asked) - 1]}
    return asked, copy


COMPOSITE = {"ChecksumSHA256": "abc=-3"}


@pytest.mark.parametrize(("carried", "responses", "asks", "sha"), [
    (True, [FULL], [False], DIGEST.hex()),  # kept by the copy: one plain request
    (True, [{}], [False], None),  # the endpoint returns none for copies: the caller reads it back
    (True, [COMPOSITE, FULL], [False, True], DIGEST.hex()),  # composite: asked for a full one
    (True, [{**FULL, "ChecksumType": "COMPOSITE"}, FULL], [False, True], DIGEST.hex()),  # composite by its type
    (True, [COMPOSITE, COMPOSITE], [False, True], None),  # never a composite one as the sha256
    (None, [{}, FULL], [False, True], DIGEST.hex()),  # unknown source, none kept: asked
    (None, [FULL], [False], DIGEST.hex()),
    (False, [FULL], [True], DIGEST.hex()),  # known to carry none: asked at once
], ids=["kept", "none-returned", "composite", "composite-type", "composite-twice", "unknown-none", "unknown-kept",
        "asked"])
def test_a_copy_asks_for_a_checksum_only_when_the_source_does_not_carry_a_full_object_one(
    carried: bool | None, responses: list[dict[str, Any]], asks: list[bool], sha: str | None
) -> None:
    asked, copy = copier(*responses)
    got = copy_with_sha256(copy, carried)
    assert asked == asks and got == sha
