"""How the S3 store names an object-store failure: an outage is transient (the sink waits and says
"not ready"), refused credentials or a missing bucket are configuration errors. The texts are the
ones obstore gives against s3proxy (captured from the integration suite)."""

from __future__ import annotations

import re

import pytest
from obstore import exceptions as obs_errors

from pipeline.model.errors import ConfigError, TransientError
from pipeline.store.s3_store import S3SegmentStore
from pipeline.store.store_url import open_segment_store

_REFUSED_CONNECTION = (
    "Generic S3 error: Error performing list request: Error performing GET "
    "http://127.0.0.1:{port}/kubetape?list-type=2&prefix=tests%2F660a97758b40%2Fepochs%2F in 249.838µs "
    "- HTTP error: error sending request"
)
_BAD_SIGNATURE = (
    "Generic S3 error: Error performing list request: Error performing GET "
    "http://127.0.0.1:{port}/kubetape?list-type=2&prefix=tests%2F6cde8eb6ad85%2Fsegments%2F in 12.18ms - "
    "Server returned non-2xx status code: 403 Forbidden: <?xml version='1.0' encoding='UTF-8'?><Error>"
    "<Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match"
)
_NO_BUCKET = (
    "Generic S3 error: Error performing list request: Error performing GET "
    "http://127.0.0.1:{port}/no-such-bucket-here?list-type=2&prefix=x%2Fsegments%2F in 73.49ms - "
    "Server returned non-2xx status code: 404 Not Found: <?xml version='1.0' encoding='UTF-8'?><Error>"
    "<Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>"
)


def _store(monkeypatch: pytest.MonkeyPatch, port: int) -> S3SegmentStore:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    store = open_segment_store("s3://kubetape/tests")
    assert isinstance(store, S3SegmentStore)
    return store


# A port or a duration with "403" in it once turned a stopped server into "access denied".
@pytest.mark.parametrize("port", [9, 403, 4030, 40321, 14030, 54403])
def test_a_server_that_does_not_answer_is_an_outage_whatever_its_port(
    monkeypatch: pytest.MonkeyPatch, port: int
) -> None:
    store = _store(monkeypatch, port)
    explained = store.explain_failure(
        "epochs/", obs_errors.GenericError(_REFUSED_CONNECTION.format(port=port))
    )
    assert isinstance(explained, TransientError)
    assert re.search(rf"127\.0\.0\.1:{port} did not answer .* check that it is running", str(explained))


@pytest.mark.parametrize("port", [9, 40321])
def test_refused_credentials_are_a_configuration_error(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    store = _store(monkeypatch, port)
    explained = store.explain_failure("segments/", obs_errors.GenericError(_BAD_SIGNATURE.format(port=port)))
    assert isinstance(explained, ConfigError)
    assert re.search(r"access denied by .* check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", str(explained))


def test_a_missing_bucket_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(monkeypatch, 40321)
    explained = store.explain_failure("segments/", obs_errors.GenericError(_NO_BUCKET.format(port=40321)))
    assert isinstance(explained, ConfigError)
    assert "bucket 'kubetape' does not exist at http://127.0.0.1:40321" in str(explained)


def test_answers_the_store_handles_itself_are_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(monkeypatch, 40321)
    assert store.explain_failure("segments/p0000-1.kseg", FileNotFoundError("gone")) is None
