"""A PostgreSQL URL is shown without its secrets, whatever its form, and ``redact`` never
fails; ``check_url`` refuses the URLs the driver would choke on or read otherwise."""

from __future__ import annotations

import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starebrain_actions.ledger.pg import (
    BadUrl,
    check_url,
    redact,
    redact_text,
    without_secrets,
)

SECRET = "S3cr3t-Pw"

#: (URL, what it is shown as): every place a secret can stand, and what must stay readable.
SHOWN = [
    (f"postgresql://sb:{SECRET}@db:5432/sms", "postgresql://sb:***@db:5432/sms"),
    (f"postgres://sb:{SECRET}@db/sms", "postgres://sb:***@db/sms"),
    (f"postgresql://:{SECRET}@db/sms", "postgresql://:***@db/sms"),
    (
        f"postgresql://sb@db:5432/sms?password={SECRET}&search_path=ledger",
        "postgresql://sb@db:5432/sms?password=***&search_path=ledger",
    ),
    (
        f"postgresql://sb@db/sms?sslmode=require&sslpassword={SECRET}&sslkey=/k/client.key",
        "postgresql://sb@db/sms?sslmode=require&sslpassword=***&sslkey=/k/client.key",
    ),
    (f"postgresql://db/sms?PASSWORD={SECRET}", "postgresql://db/sms?PASSWORD=***"),
    (f"postgresql://db/sms?pass%77ord={SECRET}", "postgresql://db/sms?pass%77ord=***"),
    (
        f"postgresql:///sms?host=/run/postgresql&password={SECRET}#frag",
        "postgresql:///sms?host=/run/postgresql&password=***#frag",
    ),
    (f"postgresql://sb:{SECRET}@[::1]:5432/sms", "postgresql://sb:***@[::1]:5432/sms"),
    # malformed, still masked: a port that is not a number, several hosts
    (f"postgresql://sb:{SECRET}@db:notaport/sms", "postgresql://sb:***@db:notaport/sms"),
    (f"postgresql://sb:{SECRET}@h1:5432,h2:5432/sms", "postgresql://sb:***@h1:5432,h2:5432/sms"),
    # a password holding an unescaped @, / or ?
    (f"postgresql://sb:{SECRET}@x@db/sms", "postgresql://sb:***@db/sms"),
    (f"postgresql://sb:pa/{SECRET}@db/sms", "postgresql://sb:***@db/sms"),
    (f"postgresql://sb:pa?{SECRET}@db/sms", "postgresql://sb:***@db/sms"),
    # nothing secret: shown as given
    ("postgresql://sb@db:5432/sms?application_name=a@b", None),
    ("postgresql://db/sms?passfile=/home/sb/.pgpass&sslrootcert=/ca.pem", None),
]


@pytest.mark.parametrize(("url", "shown"), SHOWN)
def test_redact_masks_every_secret(url: str, shown: str | None) -> None:
    """Each secret is ``***``; the user, hosts, port, database and other settings stay."""
    assert (shown or url) == redact(url)
    assert SECRET not in redact(url)


@pytest.mark.parametrize(("url", "shown"), [(url, shown) for url, shown in SHOWN if shown])
def test_redact_text_masks_the_secret_anywhere_in_a_message(url: str, shown: str) -> None:
    """A message quoting the URL, or a driver's message quoting the secret (as written or
    decoded), carries no secret."""
    message = f"cannot reach {url}: the server said {SECRET!r} and {urllib.parse.quote(SECRET)}"
    assert SECRET not in redact_text(message, url)
    assert shown in redact_text(message, url)


@given(st.text(max_size=80))
def test_redact_is_total(text: str) -> None:
    """Any text at all, a URL or not, is shown without an exception."""
    redact(f"postgresql://{text}")
    redact(text)
    redact_text(text, f"postgresql://{text}")


_PASSWORD = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=6,
    max_size=30,
).filter(lambda p: p.strip() == p and "***" not in p)


@given(_PASSWORD)
def test_a_percent_encoded_password_is_never_shown(password: str) -> None:
    """Whatever characters a password holds, properly encoded in the user info or the query,
    neither it nor its encoding appears in what is shown."""
    encoded = urllib.parse.quote(password, safe="")
    for url in (
        f"postgresql://sb:{encoded}@db:5432/sms?search_path=l",
        f"postgresql://sb@db:5432/sms?search_path=l&password={encoded}",
    ):
        shown = redact(url)
        assert encoded not in shown
        assert "db:5432/sms" in shown
        message = redact_text(f"failed: {password} {url}", url)
        assert password not in message and encoded not in message


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://h:notaport/db", "the port is not a number"),
        ("postgresql://h:0/db", "between 1 and 65535"),
        ("postgresql://h:70000/db", "between 1 and 65535"),
        ("postgresql://h/db?port=x", "the port is not a number"),
        ("postgresql://h1,h2/db", "several hosts are not supported"),
        ("postgresql://h1:5432,h2:5432/db", "several hosts are not supported"),
        ("postgresql://h/db?host=h1,h2", "several hosts are not supported"),
        ("postgresql://h/db?port=5432,5433", "several hosts are not supported"),
        (f"postgresql://sb:{SECRET}@x@db/sms", "percent-encode it as %40"),
        (f"postgresql://sb:pa/{SECRET}@db/sms", "percent-encode it (/ is %2F"),
        ("postgresql://::1:5432/db", "an IPv6 address goes in brackets"),
        ("postgresql://[::1/db", "an IPv6 address is written [ADDRESS]:PORT"),
        ("postgresql://h/db?password", "its query is not NAME=VALUE pairs"),
        ("mysql://h/db", "expected postgresql://"),
    ],
)
def test_check_url_refuses_what_the_driver_would_choke_on(url: str, problem: str) -> None:
    """A malformed URL is refused with what is wrong, and the URL shown redacted."""
    with pytest.raises(BadUrl) as caught:
        check_url(url)
    assert problem in str(caught.value)
    assert f"malformed PostgreSQL URL {redact(url)}: " in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://sb@db:5432/sms?search_path=ledger",
        "postgres://db/sms",
        "postgresql:///sms?host=/run/postgresql",
        "postgresql://sb:p%40ss%2Fw@[::1]:5432/sms?sslmode=require&password=x",
        "postgresql://db:/sms",
    ],
)
def test_check_url_accepts_well_formed_urls(url: str) -> None:
    """Well-formed URLs, with or without secrets, IPv6 or a socket directory, pass."""
    check_url(url)


def test_without_secrets_is_a_url_to_paste() -> None:
    """The URL to paste keeps everything but the secrets, and shows no ``***``."""
    url = f"postgresql://sb:{SECRET}@db:5432/sms?password={SECRET}&search_path=ledger"
    assert "postgresql://sb@db:5432/sms?search_path=ledger" == without_secrets(url)
    assert "postgresql://db/sms" == without_secrets(f"postgresql://db/sms?sslpassword={SECRET}")
