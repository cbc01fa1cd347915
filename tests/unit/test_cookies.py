"""The cookie signer on its own: what verifies, what does not, and that its caches stay bounded."""

from __future__ import annotations

from ngym.server.sessions.cookies import CookieSigner


def test_a_cookie_verifies_on_another_signer_with_the_same_secret_only() -> None:
    issued = CookieSigner("s3cret", "ngym_session").sign("abc123")
    assert CookieSigner("s3cret", "ngym_session").unsign(issued) == "abc123"  # another replica, empty caches
    assert CookieSigner("other", "ngym_session").unsign(issued) is None


def test_tampered_values_are_no_session() -> None:
    signer = CookieSigner("s3cret", "ngym_session")
    session_id, _, tag = signer.sign("abc123").partition(".")
    fresh = CookieSigner("s3cret", "ngym_session")
    flipped = tag[:-1] + ("A" if tag[-1] != "A" else "B")
    for value in (f"{session_id}.{flipped}", f"abc124.{tag}", session_id, f".{tag}", "", "abc123."):
        assert fresh.unsign(value) is None, value
        assert signer.unsign(value) is None, value  # the issuing signer's cache does not widen what verifies


def test_cookie_header_round_trip() -> None:
    signer = CookieSigner("s3cret", "sid")
    header = signer.set_cookie_header("abc123")
    assert header.startswith(b"sid=abc123.") and b"HttpOnly" in header
    cookie = header.split(b";")[0]
    assert CookieSigner("s3cret", "sid").session_id_from_header(b"other=1; " + cookie) == "abc123"


def test_caches_stay_bounded() -> None:
    signer = CookieSigner("s3cret", "sid")
    signer.CACHE_SIZE = 100
    values = [signer.sign(f"id{i}") for i in range(1000)]
    for i in range(1000):
        signer.set_cookie_header(f"id{i}")
    assert len(signer._verified) <= 100 and len(signer._headers) <= 100
    assert signer.unsign(values[0]) == "id0"  # evicted, so verified again: still valid


def test_a_lone_cookie_reads_as_it_does_among_others() -> None:
    signer = CookieSigner("s3cret", "sid")
    value = signer.sign("abc123").encode()
    for lone, among in (
        (b"sid=" + value, b"a=1; sid=" + value + b"; b=2"),
        (b'  sid="' + value + b'"  ', b'a=1;  sid="' + value + b'"'),
        (b"other=" + value, b"a=1; other=" + value),
        (b"sid=" + value[:-1], b"a=1; sid=" + value[:-1]),
    ):
        assert signer.session_id_from_header(lone) == signer.session_id_from_header(among)
    assert signer.session_id_from_header(b"sid=" + value) == "abc123"
    assert signer.session_id_from_header(b"other=" + value) is None
